//! Links liblumen, from the first of:
//! 1. the directory in LUMEN_LIB_DIR (a build tree's `build/src`, or an installed `lib`):
//!    the shared library;
//! 2. pkg-config's `lumen` package, at least this crate's version (an installed prefix;
//!    PKG_CONFIG_PATH for one outside pkg-config's path): the shared library;
//! 3. the lumen source tree this crate sits in (a path or git dependency): liblumen is built
//!    with CMake into OUT_DIR, CPU backend only, and linked statically, so that the program
//!    needs no library at run time but the system's (libstdc++, Abseil, xxHash);
//! 4. otherwise the linker's default paths.
//!
//! The library's directory goes to dependents as DEP_LUMEN_LIB_DIR (`links = "lumen"`), for
//! an rpath where the shared library is outside the loader's path.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The libraries liblumen.a needs, as pkg-config names them: what src/CMakeLists.txt links
/// lumen with (Abseil's status, statusor, strings and synchronization; xxHash).
const STATIC_DEPENDENCIES: &[&str] =
    &["absl_status", "absl_statusor", "absl_strings", "absl_synchronization", "libxxhash"];

fn main() {
    for variable in ["LUMEN_LIB_DIR", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"] {
        println!("cargo:rerun-if-env-changed={}", variable);
    }
    if let Some(dir) = env::var_os("LUMEN_LIB_DIR").filter(|dir| !dir.is_empty()) {
        link_shared(Some(Path::new(&dir)));
    } else if let Some(dir) = pkg_config_lib_dir() {
        link_shared(Some(&dir));
    } else if let Some(root) = source_tree() {
        link_static(&build_from_source(&root));
    } else {
        link_shared(None);
    }
}

fn link_shared(dir: Option<&Path>) {
    if let Some(dir) = dir {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=lumen");
}

/// liblumen.a, then what it needs: Abseil and xxHash (found by pkg-config), hiredis where it
/// is installed, the C++ runtime, and the threads and dl libraries that CMake adds.
fn link_static(dir: &Path) {
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
    println!("cargo:rustc-link-lib=static=lumen");
    for dir in dependency_flags("--libs-only-L", "-L") {
        println!("cargo:rustc-link-search=native={}", dir);
    }
    let system = ["stdc++", "pthread", "dl"].map(String::from);
    for name in dependency_flags("--libs-only-l", "-l").into_iter().chain(system) {
        println!("cargo:rustc-link-lib=dylib={}", name);
    }
    // hiredis, optional: CMake builds the redis:// store where libhiredis-dev is installed.
    if pkg_config(&["--exists", "hiredis"]).is_some() {
        println!("cargo:rustc-link-lib=dylib=hiredis");
    }
}

/// What follows `prefix` in pkg-config's `option` words for liblumen.a's dependencies (the
/// directories of `-L`, the names of `-l`).
fn dependency_flags(option: &str, prefix: &str) -> Vec<String> {
    pkg_config(&[&[option], STATIC_DEPENDENCIES].concat())
        .unwrap_or_else(|| {
            panic!("pkg-config finds no {:?}, which liblumen.a needs", STATIC_DEPENDENCIES)
        })
        .split_whitespace()
        .filter_map(|word| word.strip_prefix(prefix).map(str::to_owned))
        .collect()
}

/// pkg-config's answer to `arguments`, or None when it is missing or fails.
fn pkg_config(arguments: &[&str]) -> Option<String> {
    let output = Command::new("pkg-config").args(arguments).output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8(output.stdout).ok()?.trim().to_owned())
}

/// The library directory of the lumen pkg-config finds, if it is at least this crate's version.
fn pkg_config_lib_dir() -> Option<PathBuf> {
    let version = format!("--atleast-version={}", env::var("CARGO_PKG_VERSION").unwrap());
    pkg_config(&[&version, "lumen"])?;
    let dir = pkg_config(&["--variable=libdir", "lumen"])?;
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The lumen checkout around this crate (bindings/rust/lumen-sys), if there is one.
fn source_tree() -> Option<PathBuf> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let root = manifest.ancestors().nth(3)?.to_path_buf();
    let is_lumen = root.join("CMakeLists.txt").is_file()
        && root.join("capi/include/lumen/lumen.h").is_file();
    is_lumen.then_some(root)
}

/// Builds liblumen.a from the checkout into OUT_DIR; returns its directory. CMake rebuilds
/// only what changed; the GPU backends stay off (an installed lumen brings them).
fn build_from_source(root: &Path) -> PathBuf {
    for part in ["CMakeLists.txt", "cmake", "src", "capi", "backends/cpu"] {
        println!("cargo:rerun-if-changed={}", root.join(part).display());
    }
    let build = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("lumen-build");
    if !build.join("CMakeCache.txt").is_file() {
        run(Command::new("cmake").arg("-S").arg(root).arg("-B").arg(&build).args([
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLUMEN_ENABLE_CUDA=OFF",
            "-DLUMEN_ENABLE_HIP=OFF",
            "-DLUMEN_BUILD_TESTS=OFF",
            "-DLUMEN_BUILD_EXAMPLES=OFF",
            "-DLUMEN_BUILD_BINDINGS=OFF",
        ]));
    }
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "1".into());
    run(Command::new("cmake").arg("--build").arg(&build)
        .args(["--target", "lumen_static", "--parallel", &jobs]));
    build.join("src")
}

/// Runs a CMake step; on failure, stops the build with its output.
fn run(command: &mut Command) {
    let output = command.output().unwrap_or_else(|error| {
        panic!("cannot run {:?} ({}); install CMake, or point LUMEN_LIB_DIR or pkg-config \
                at an installed lumen", command, error)
    });
    if !output.status.success() {
        panic!("{:?} failed:\n{}{}\nInstall what it names, or point LUMEN_LIB_DIR or \
                pkg-config at an installed lumen", command,
               String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    }
}
