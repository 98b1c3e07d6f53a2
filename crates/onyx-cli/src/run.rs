//! `onyx run`.

use std::path::Path;

use onyx::{Result, Session, Tensor};

use onyx::npy;

use crate::{parse_pairs, random, summary, SessionArgs};

/// The inputs for one run: files the user named, seeded random values for the rest.
pub fn gather_inputs(session: &Session, args: &[String]) -> Result<Vec<(String, Tensor)>> {
    let given = parse_pairs(args, "--input")?;
    let mut inputs = vec![];
    for (name, file) in &given {
        inputs.push((name.clone(), npy::read(Path::new(file))?));
    }
    for (i, info) in session.inputs().iter().enumerate() {
        if !given.iter().any(|(n, _)| n == &info.name) {
            inputs.push((info.name.clone(), random::random_input(info, 0x5eed + i as u64)?));
        }
    }
    Ok(inputs)
}

/// Runs the model once, prints a summary per output and writes them to `output_dir`.
pub fn run(model: &Path, inputs: &[String], output_dir: Option<&Path>, args: &SessionArgs) -> Result<()> {
    let session = args.builder()?.commit_from_file(model)?;
    let inputs = gather_inputs(&session, inputs)?;
    let outputs = session.run(inputs)?;
    if let Some(dir) = output_dir {
        std::fs::create_dir_all(dir).map_err(|e| onyx::Error::Io { path: dir.display().to_string(), source: e })?;
    }
    for (name, value) in outputs.iter() {
        println!("{}", summary::describe(name, value));
        if let Some(dir) = output_dir {
            let path = dir.join(format!("{}.npy", summary::file_stem(name)));
            npy::write(&path, value.as_tensor()?)?;
        }
    }
    Ok(())
}
