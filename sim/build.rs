// Compiles the C shim for the module API's variadic functions
// (csrc/variadic.c): stable Rust cannot define C variadic functions.
fn main() {
    println!("cargo:rerun-if-changed=csrc/variadic.c");
    // The simulated system clock (src/host/clock.rs): the module binds its
    // clock_gettime to this binary's when it is loaded.
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=clock_gettime");
    cc::Build::new()
        .file("csrc/variadic.c")
        .warnings(true)
        .compile("simvariadic");
}
