// Compiles the C shim for the module API's variadic functions
// (csrc/variadic.c): stable Rust cannot define C variadic functions.
fn main() {
    println!("cargo:rerun-if-changed=csrc/variadic.c");
    cc::Build::new()
        .file("csrc/variadic.c")
        .warnings(true)
        .compile("simvariadic");
}
