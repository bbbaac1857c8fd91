use dlock_sim::host::{self, Reply};
fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or("target/release/libdlock.so".into());
    let m = dlock_sim::modworld::load(&path).unwrap();
    let a = host::connect(m);
    let b = host::connect(m);
    let r = host::command(
        m,
        a,
        &[b"DLOCK.ACQUIRE", b"k", b"o1", b"PX", b"1000", b"BIND"],
    );
    println!("acquire: {r:?}");
    let r = host::command(
        m,
        b,
        &[
            b"DLOCK.ACQUIRE",
            b"k",
            b"o2",
            b"PX",
            b"1000",
            b"WAIT",
            b"500",
        ],
    );
    println!("acquire b (blocks): {r:?}");
    let r = host::command(m, a, &[b"DLOCK.RELEASE", b"k", b"o1"]);
    println!("release: {r:?}");
    host::turn(m, true);
    println!("b got: {:?}", host::take_replies(m, b));
    let r = host::command(m, a, &[b"DLOCK.INFO", b"k"]);
    println!("info: {r:?}");
    println!("INFO: {:?}", host::info(m));
    println!("bytes {}", host::module_bytes());
    let _ = Reply::Null;
}
