//! Builds src/execl.c (C variadic functions; see src/exec.rs).

fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new()
        .file("src/execl.c")
        .warnings(true)
        .compile("tiermem_execl");
}
