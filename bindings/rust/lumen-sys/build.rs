//! Links liblumen. Where from, in order: the directory in LUMEN_LIB_DIR (a build tree's
//! `build/src`, or an installed `lib`), pkg-config's `lumen` package (an installed prefix;
//! PKG_CONFIG_PATH for a non-standard one), or the linker's default paths. The directory is
//! passed on to dependents as DEP_LUMEN_LIB_DIR so that they can set an rpath.
use std::env;
use std::process::Command;

fn pkg_config_lib_dir() -> Option<String> {
    let output = Command::new("pkg-config").args(["--libs-only-L", "lumen"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout)
        .ok()?
        .split_whitespace()
        .find_map(|flag| flag.strip_prefix("-L").map(str::to_owned))
}

fn main() {
    println!("cargo:rerun-if-env-changed=LUMEN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = env::var("LUMEN_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(pkg_config_lib_dir);
    if let Some(dir) = dir {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:lib_dir={}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=lumen");
}
