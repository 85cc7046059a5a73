//! Prints the CRDs of kaos.tools/v1alpha1 as one YAML stream, or writes one file per CRD.
//!
//! `crdgen` prints to stdout; `crdgen --write DIR` (re)writes `DIR/<group>_<plural>.yaml`;
//! `crdgen --write-helm DIR` writes the same files annotated `helm.sh/resource-policy: keep`, as
//! templates of the kaos-crds chart (so `helm upgrade` upgrades them and uninstall keeps them;
//! a `{{` in their text is escaped so that Helm renders it as it is);
//! `crdgen --write-docs FILE` rewrites the generated region of the API reference `FILE`
//! (`docs/api.md`) from the same CRDs, leaving the hand-written text around it as it is.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => kaos_api::crd::all_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(|e| e.to_string()),
        [flag, dir] if flag == "--write" => write_all(PathBuf::from(dir), false),
        [flag, dir] if flag == "--write-helm" => write_all(PathBuf::from(dir), true),
        [flag, file] if flag == "--write-docs" => write_docs(PathBuf::from(file)),
        _ => Err("usage: crdgen [--write DIR | --write-helm DIR | --write-docs FILE]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("crdgen: {message}");
            ExitCode::FAILURE
        }
    }
}

fn write_all(dir: PathBuf, helm: bool) -> Result<(), String> {
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (file, crd) in kaos_api::crd::all() {
        let path = dir.join(file);
        let yaml = if helm {
            kaos_api::crd::to_helm_template(&crd)
        } else {
            kaos_api::crd::to_yaml(&crd)
        }
        .map_err(|e| e.to_string())?;
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn write_docs(path: PathBuf) -> Result<(), String> {
    let document = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let rendered = kaos_api::docs::render_document(&document)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(&path, rendered).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
