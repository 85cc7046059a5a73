//! Prints the CRDs of kaos.tools/v1alpha1 as one YAML stream, or writes one file per CRD.
//!
//! `crdgen` prints to stdout; `crdgen --write DIR` (re)writes `DIR/<group>_<plural>.yaml`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => kaos_api::crd::all_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(|e| e.to_string()),
        [flag, dir] if flag == "--write" => write_all(PathBuf::from(dir)),
        _ => Err("usage: crdgen [--write DIR]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("crdgen: {message}");
            ExitCode::FAILURE
        }
    }
}

fn write_all(dir: PathBuf) -> Result<(), String> {
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (file, crd) in kaos_api::crd::all() {
        let path = dir.join(file);
        let yaml = kaos_api::crd::to_yaml(&crd).map_err(|e| e.to_string())?;
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
