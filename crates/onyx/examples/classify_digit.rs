//! Classifies a handwritten digit with the model in `models/digits/` on the CPU EP.
//!
//! ```text
//! cargo run --release --example classify_digit -- models/digits/sample_7.npy
//! ```

use std::path::{Path, PathBuf};

use onyx::{npy, SessionBuilder};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let image_path =
        std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(|| root.join("models/digits/sample_7.npy"));
    let session = SessionBuilder::new().commit_from_file(root.join("models/digits/digits.onnx"))?;
    let image = npy::read(&image_path)?;
    let pixels = image.as_slice::<f32>()?.to_vec();

    println!("input {} ({} pixels, 0..16):", image_path.display(), pixels.len());
    for row in pixels.chunks(8) {
        let line: String =
            row.iter().map(|&p| [' ', '.', ':', '+', '#'][((p / 16.0) * 4.0).round() as usize % 5]).collect();
        println!("  |{line}|");
    }

    let outputs = session.run([("image", image)])?;
    let probabilities = outputs.get("probabilities")?.as_tensor()?.as_slice::<f32>()?;
    let mut ranked: Vec<(usize, f32)> = probabilities.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (digit, p) = ranked[0];
    println!("predicted digit: {digit} (probability {p:.4})");
    let others: Vec<String> = ranked[1..3].iter().map(|(d, p)| format!("{d}: {p:.4}")).collect();
    println!("runners-up: {}", others.join(", "));
    Ok(())
}
