//! `onyx generate`'s contract: streamed text, the `--json` line's keys, prompts as text or
//! ids, seeded sampling, `--chat` through the folder's template, and errors.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value as Json;

fn onyx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onyx")).args(args).output().expect("the onyx binary runs")
}

fn folder(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/llm").join(name).display().to_string()
}

fn json_lines(out: &Output) -> Vec<Json> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(Json::is_object)
        .collect()
}

fn ids(v: &Json) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

#[test]
fn a_text_prompt_and_its_ids_generate_the_same_tokens_with_the_json_contract() {
    let dir = folder("qwen2-cpu-int4");
    let by_text =
        json_lines(&onyx(&["generate", &dir, "--prompt", "onyx runs the cache", "--max-length", "20", "--json"]))
            .pop()
            .unwrap();
    for key in [
        "input_tokens",
        "output_tokens",
        "text",
        "time_to_first_token_ms",
        "prompt_tokens_per_s",
        "decode_tokens_per_s",
        "peak_host_bytes",
    ] {
        assert!(by_text.get(key).is_some(), "no {key} in {by_text}");
    }
    let input = ids(&by_text["input_tokens"]);
    let output = ids(&by_text["output_tokens"]);
    assert!(!input.is_empty() && !output.is_empty() && input.len() + output.len() <= 20 + 1, "{by_text}");
    let list: Vec<String> = input.iter().map(|t| t.to_string()).collect();
    let by_ids = json_lines(&onyx(&["generate", &dir, "--input-ids", &list.join(","), "--max-length", "20", "--json"]))
        .pop()
        .unwrap();
    assert_eq!(by_ids["output_tokens"], by_text["output_tokens"]);
    assert_eq!(by_ids["text"], by_text["text"]);
}

#[test]
fn a_seed_reproduces_sampled_text() {
    let dir = folder("llama-cpu-int4");
    let sample = |seed: &str| {
        json_lines(&onyx(&[
            "generate",
            &dir,
            "--input-ids",
            "22,28,59",
            "--max-length",
            "30",
            "--do-sample",
            "--top-k",
            "0",
            "--temperature",
            "1.5",
            "--seed",
            seed,
            "--json",
        ]))
        .pop()
        .unwrap()["output_tokens"]
            .clone()
    };
    assert_eq!(sample("7"), sample("7"));
    assert_ne!(sample("7"), sample("8"));
}

#[test]
fn chat_runs_each_turn_through_the_template_and_keeps_the_history_cached() {
    let tmp: PathBuf = std::env::temp_dir().join(format!("onyx-cli-chat-{}", std::process::id()));
    let src = PathBuf::from(folder("ernie-cpu-fp32"));
    std::fs::create_dir_all(&tmp).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.join(entry.file_name())).unwrap();
    }
    std::fs::write(tmp.join("chat_template.jinja"), "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .args(["generate", tmp.to_str().unwrap(), "--chat", "--max-length", "128", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"heads\nthe cache\n").unwrap();
    let turns = json_lines(&child.wait_with_output().unwrap());
    assert_eq!(turns.len(), 2, "{turns:?}");
    let (first, second) = (ids(&turns[0]["input_tokens"]), ids(&turns[1]["input_tokens"]));
    // The second turn runs only what follows the cached history (the reply's end, the new
    // user line, the assistant prefix), not the first turn again.
    assert!(!second.is_empty() && second.len() < first.len() + ids(&turns[0]["output_tokens"]).len(), "{turns:?}");
    let no_template = onyx(&["generate", &folder("llama-cpu-fp32"), "--chat"]);
    assert_eq!(no_template.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no_template.stderr).contains("no chat template"));
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn bad_input_exits_1_with_a_message() {
    let dir = folder("qwen2-cpu-int4");
    for (args, message) in [
        (vec!["--input-ids", "1,2,999"], "token id 999 is outside the vocabulary"),
        (vec!["--prompt", "x", "--provider", "tpu"], "unknown provider 'tpu'"),
        (vec!["--input-ids", "5,6,7,8", "--max-length", "3"], "exceed max_length 3"),
        (vec![], "give the prompt"),
    ] {
        let out = onyx(&[&["generate", dir.as_str()], args.as_slice()].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn beam_search_prints_the_best_beam() {
    let out = onyx(&[
        "generate",
        &folder("qwen2-cpu-fp32"),
        "--input-ids",
        "22,28,59,53",
        "--max-length",
        "16",
        "--num-beams",
        "3",
        "--json",
    ]);
    let report = json_lines(&out).pop().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(report["text"].as_str().unwrap()), "{text}");
    assert!(ids(&report["output_tokens"]).len() <= 12);
}
