//! Tests and examples of this crate find liblumen where lumen-sys linked it (an rpath), so
//! they run from a build tree without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LUMEN_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_LUMEN_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
