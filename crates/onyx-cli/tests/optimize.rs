//! `onyx optimize IN OUT`: the saved model computes what IN computes.

use std::path::{Path, PathBuf};
use std::process::Command;

use onyx::{SessionBuilder, Tensor};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tiny_cnn() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny_cnn/tiny_cnn.onnx")
}

/// The single output of `model` for `image`, on the CPU EP with the graph run as written.
fn run(model: &Path, image: &Tensor) -> Vec<f32> {
    let session = SessionBuilder::new()
        .with_optimization_level(onyx::OptimizationLevel::Disable)
        .commit_from_file(model)
        .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let outputs = session.run([("image", image.clone())]).unwrap();
    let (_, value) = outputs.iter().next().unwrap();
    value.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn optimize_writes_a_model_with_the_same_outputs() {
    let dir = std::env::temp_dir().join(format!("onyx-cli-optimize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = fastrand::Rng::with_seed(21);
    let image =
        Tensor::from_vec(vec![1, 3, 32, 32], (0..3 * 32 * 32).map(|_| rng.f32() * 2.0 - 1.0).collect()).unwrap();
    let want = run(&tiny_cnn(), &image);
    for level in ["disable", "basic", "all"] {
        let out = dir.join(format!("tiny_cnn_{level}.onnx"));
        let result = Command::new(env!("CARGO_BIN_EXE_onyx"))
            .args(["optimize", tiny_cnn().to_str().unwrap(), out.to_str().unwrap(), "--level", level])
            .output()
            .unwrap();
        let stdout = text(&result.stdout);
        assert!(result.status.success(), "{level}: {}{stdout}", text(&result.stderr));
        let table_header = stdout.lines().next().unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(table_header, ["op", "before", "after", "change"], "{stdout}");
        let total = stdout.lines().find(|l| l.starts_with("total")).unwrap_or_else(|| panic!("no total in {stdout}"));
        let counts: Vec<usize> = total.split_whitespace().skip(1).take(2).map(|n| n.parse().unwrap()).collect();
        assert_eq!(counts[0], 10, "tiny_cnn has 10 nodes: {stdout}");
        assert!(counts[1] <= 10 && (level != "disable" || counts[1] == 10), "{stdout}");
        assert!(stdout.contains("Conv") && stdout.contains("wrote "), "{stdout}");
        assert!(stdout.contains(&format!("optimization at level {level}: ")), "{stdout}");
        let got = run(&out, &image);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "{level}: output {i}: {g} vs {w}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn optimize_rejects_an_unknown_level() {
    let out = std::env::temp_dir().join(format!("onyx-cli-optimize-bad-{}.onnx", std::process::id()));
    let result = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .args(["optimize", tiny_cnn().to_str().unwrap(), out.to_str().unwrap(), "--level", "fastest"])
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(1));
    assert!(text(&result.stderr).contains("expected disable, basic, extended or all"), "{}", text(&result.stderr));
    assert!(!out.exists());
}
