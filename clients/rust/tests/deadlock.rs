//! `DeadlockError` against a real server: two clients that deadlock across two
//! keys; the one whose wait would close the cycle gets the cycle, parsed.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dlock_client::Client;
use support::*;

#[test]
fn the_request_closing_a_cycle_gets_a_deadlock_error_with_the_cycle() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    let gb = b.mutex("stock").lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let a2 = a.clone();
    let t = thread::spawn(move || {
        let ga = a2.mutex("orders").lock().unwrap();
        tx.send(a2.owner()).unwrap();
        // Waits on the server for stock, held by b.
        let got = a2.mutex("stock").lock().map(|g| g.token());
        drop(ga);
        got
    });
    let owner_a = rx.recv().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s
        .info_field("dlock", "dlock_waiting_clients")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        < 1
    {
        assert!(Instant::now() < deadline, "a did not block");
        thread::sleep(Duration::from_millis(5));
    }
    let err = match b.mutex("orders").lock() {
        Err(e) => e,
        Ok(_) => panic!("b was granted orders"),
    };
    assert!(err.is_deadlock());
    let d = err.deadlock().expect("a DeadlockError");
    assert_eq!(d.owners(), [b.owner().as_bytes(), owner_a.as_bytes()]);
    assert_eq!(d.keys(), [&b"orders"[..], &b"stock"[..]]);
    assert_eq!(d.cycle[0].waits_for, owner_a.as_bytes());
    // b releases what it holds, as the error says; a gets stock.
    drop(gb);
    assert!(t.join().unwrap().unwrap() > 0);
}
