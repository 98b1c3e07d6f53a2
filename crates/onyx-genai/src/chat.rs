//! Chat templates: Hugging Face's Jinja templates rendered as transformers renders them
//! (blocks trimmed, Python's string and dict methods, `tojson`, `raise_exception`, the
//! tokenizer's special tokens as variables), through minijinja.

use minijinja::value::Serde;
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};

use crate::error::{invalid, Result};

/// The tokenizer's named special tokens, which templates read as `bos_token`, `eos_token`, ...
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialTokens {
    pub names: Vec<(&'static str, String)>,
}

/// Keys of `tokenizer_config.json` that name special tokens.
pub(crate) const SPECIAL_TOKEN_KEYS: [&str; 6] =
    ["bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token"];

/// Renders `template` for `messages` (a JSON list of `{"role", "content", ...}`), with the
/// `tools` JSON list where given.
pub(crate) fn render(
    template: &str,
    messages: &str,
    tools: Option<&str>,
    add_generation_prompt: bool,
    special: &SpecialTokens,
) -> Result<String> {
    let messages: serde_json::Value =
        serde_json::from_str(messages).map_err(|e| invalid(format!("chat messages: not JSON: {e}")))?;
    if !messages.is_array() {
        return Err(invalid("chat messages: expected a JSON list of messages"));
    }
    let tools: Option<serde_json::Value> = tools
        .map(|t| serde_json::from_str(t).map_err(|e| invalid(format!("chat tools: not JSON: {e}"))))
        .transpose()?;
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", |message: String| -> std::result::Result<Value, JinjaError> {
        Err(JinjaError::new(ErrorKind::InvalidOperation, message))
    });
    env.add_template("chat", template)
        .map_err(|e| invalid(format!("chat template does not parse: {}", describe(&e))))?;
    let mut context: Vec<(&str, Value)> = vec![
        ("messages", Value::from(Serde(&messages))),
        ("add_generation_prompt", Value::from(add_generation_prompt)),
    ];
    if let Some(tools) = &tools {
        context.push(("tools", Value::from(Serde(tools))));
    }
    for (name, token) in &special.names {
        context.push((name, Value::from(token.as_str())));
    }
    let context = Value::from(
        context.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<std::collections::BTreeMap<String, Value>>(),
    );
    let template = env.get_template("chat").map_err(|e| invalid(describe(&e)))?;
    template.render(context).map_err(|e| invalid(format!("chat template failed to render: {}", describe(&e))))
}

/// `tojson` as transformers defines it: Python's `json.dumps` (`", "` and `": "` between
/// items, or `indent`; non-ASCII characters kept; keys in the given order).
fn tojson(value: Value, kwargs: minijinja::value::Kwargs) -> std::result::Result<Value, JinjaError> {
    use serde::Serialize;
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = vec![];
    let done = match indent {
        Some(n) => {
            let spaces = " ".repeat(n);
            value.serialize(&mut serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(spaces.as_bytes()),
            ))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, PythonSeparators)),
    };
    done.map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from(String::from_utf8(out).map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?))
}

/// serde_json's compact output with Python's default separators.
struct PythonSeparators;

impl serde_json::ser::Formatter for PythonSeparators {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.begin_array_value(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// minijinja's error with its cause and line.
fn describe(e: &JinjaError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text += &format!(": {s}");
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special() -> SpecialTokens {
        SpecialTokens { names: vec![("bos_token", "<s>".into()), ("eos_token", "</s>".into())] }
    }

    #[test]
    fn renders_with_trimmed_blocks_python_methods_and_special_tokens() {
        let template = "{{ bos_token }}{% for m in messages %}\n  {% if m.role == 'system' %}[{{ m.content.strip() }}]{% else %}{{ m['role'] | upper }}: {{ m.content }}{{ eos_token }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}";
        let out = render(
            template,
            r#"[{"role": "system", "content": " be brief "}, {"role": "user", "content": "hé 日本"}]"#,
            None,
            true,
            &special(),
        )
        .unwrap();
        assert_eq!(out, "<s>[be brief]USER: hé 日本</s>ASSISTANT:");
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let t = "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}";
        let out = render(t, r#"[{"z": [1, "é<>"], "a": {}}]"#, None, false, &special()).unwrap();
        assert_eq!(out, "{\"z\": [1, \"é<>\"], \"a\": {}}|{\n  \"z\": [\n    1,\n    \"é<>\"\n  ],\n  \"a\": {}\n}");
    }

    #[test]
    fn errors_name_the_cause() {
        let raise =
            "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user') }}{% endif %}";
        let err =
            render(raise, r#"[{"role": "system", "content": "x"}]"#, None, false, &special()).unwrap_err().to_string();
        assert!(err.contains("first message must be the user"), "{err}");
        let err = render("{% for %}", "[]", None, false, &special()).unwrap_err().to_string();
        assert!(err.contains("does not parse"), "{err}");
        assert!(render("x", "{\"role\": 1}", None, false, &special()).unwrap_err().to_string().contains("JSON list"));
    }
}
