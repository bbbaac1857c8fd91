//! What the client refuses and how its errors read, against real redis-server
//! processes: zero leases (refused before anything is sent, as the Python and Node
//! clients do), the typed error predicates, and the hint when the module is not loaded.

mod support;

use std::time::Duration;

use dlock_client::aio::{AsyncClient, AsyncMultiLock, AsyncRedLock};
use dlock_client::recipes::Election;
use dlock_client::{Client, Error, FoundKind, MultiLock, Options, RedLock};
use support::*;

/// A zero lease is an [`Error::Invalid`] that says what was wrong.
fn assert_zero_lease_refused(e: Error, what: &str) {
    assert!(
        matches!(e, Error::Invalid(_)),
        "a zero lease must be refused as invalid, got {e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(what) && text.contains("must be positive"),
        "the error should name {what} and say it must be positive: {text}"
    );
}

#[test]
fn a_zero_lease_is_refused_everywhere_a_lease_is_given() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let zero = Some(Duration::ZERO);
    for lock in [
        c.mutex("z"),
        c.rw("z-rw").read(),
        c.rw("z-rw").write(),
        c.fair("z-fair"),
        c.semaphore("z-sem", 2, 1),
    ] {
        let e = lock.try_lock(Duration::ZERO, zero).unwrap_err();
        assert_zero_lease_refused(e, "lease");
        let e = lock.try_lock(Duration::from_millis(50), zero).unwrap_err();
        assert_zero_lease_refused(e, "lease");
        assert!(info_nil(&s, lock.name()), "nothing is held");
    }
    // A sub-millisecond lease is not zero: it is sent (rounded up to 1 ms), not
    // refused. Whether the guard comes back depends on the machine: when the reply
    // takes longer than a quarter of the lease, the client re-anchors the lease with
    // a RENEW, and a 1 ms lease has lapsed by then on a loaded machine (`None`).
    let tiny = c
        .mutex("tiny")
        .try_lock(Duration::ZERO, Some(Duration::from_micros(300)));
    assert!(tiny.is_ok(), "a 300 µs lease must not be refused: {tiny:?}");

    // The watchdog lease of the options, used when no lease is given.
    // A client with a zero watchdog lease is refused when it is made.
    let o = Options::default().watchdog_lease(Duration::ZERO);
    assert_zero_lease_refused(
        Client::with_options(s.url(), o.clone()).unwrap_err(),
        "watchdog_lease",
    );

    // MultiLock: nothing taken.
    let m = MultiLock::new([c.mutex("m1"), c.mutex("m2")]).unwrap();
    assert_zero_lease_refused(m.try_lock(Duration::ZERO, zero).unwrap_err(), "lease");
    assert!(info_nil(&s, "m1") && info_nil(&s, "m2"));

    // RedLock.
    let r = RedLock::open([s.url()], "red").unwrap();
    assert_zero_lease_refused(r.try_lock(Duration::ZERO, zero).unwrap_err(), "lease");
    assert_zero_lease_refused(
        RedLock::open_with_options([s.url()], "red", o).unwrap_err(),
        "watchdog_lease",
    );
    assert!(info_nil(&s, "red"));

    // Election: the term's lease.
    let e = Election::new(&c, "elect").lease(Duration::ZERO);
    assert_zero_lease_refused(
        e.try_campaign(Some(Duration::ZERO)).unwrap_err(),
        "Election::lease",
    );
    assert!(info_nil(&s, "elect"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_zero_lease_is_refused_by_the_async_client_too() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let zero = Some(Duration::ZERO);
    for lock in [c.mutex("z"), c.fair("z-fair"), c.semaphore("z-sem", 3, 2)] {
        let e = lock.try_lock(Duration::ZERO, zero).await.unwrap_err();
        assert_zero_lease_refused(e, "lease");
        assert!(info_nil(&s, lock.name()));
    }
    let m = AsyncMultiLock::new([c.mutex("m1"), c.mutex("m2")]).unwrap();
    let e = m.try_lock(Duration::ZERO, zero).await.unwrap_err();
    assert_zero_lease_refused(e, "lease");
    let r = AsyncRedLock::open([s.url()], "red").unwrap();
    let e = r.try_lock(Duration::ZERO, zero).await.unwrap_err();
    assert_zero_lease_refused(e, "lease");
    let o = Options::default().watchdog_lease(Duration::ZERO);
    let e = AsyncClient::with_options(s.url(), o).unwrap_err();
    assert_zero_lease_refused(e, "watchdog_lease");
    assert!(info_nil(&s, "m1") && info_nil(&s, "red"));
}

#[test]
fn a_wrong_kind_is_a_typed_error_naming_the_kind_found() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let _held = c.fair("k").lock().unwrap();
    let e = c.mutex("k").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_wrong_kind(), "{e:?}");
    assert_eq!(e.found_kind(), Some(FoundKind::Fair));
    assert_eq!(e.code(), Some("WRONGKIND"));
    assert!(matches!(
        e,
        Error::WrongKind {
            found: Some(FoundKind::Fair),
            ..
        }
    ));
    let text = e.to_string();
    assert!(
        text.contains("holds a fair lock") && text.contains("DLOCK.FAIRACQUIRE"),
        "{text}"
    );
    assert!(!e.is_not_held() && !e.is_queue_full() && !e.is_unknown_command());
    // The other kinds, each found by a command of another kind.
    let _m = c.mutex("m").lock().unwrap();
    let _r = c.rw("r").read().lock().unwrap();
    let _s = c.semaphore("s", 3, 1).lock().unwrap();
    c.latch("l").set(2).unwrap();
    for (key, kind) in [
        ("m", FoundKind::Mutex),
        ("r", FoundKind::ReadWrite),
        ("s", FoundKind::Semaphore),
        ("l", FoundKind::Latch),
    ] {
        let e = c.fair(key).try_lock(Duration::ZERO, None).unwrap_err();
        assert_eq!(e.found_kind(), Some(kind), "{key}: {e}");
    }
    assert_eq!(
        c.latch("m").count_down().unwrap_err().found_kind(),
        Some(FoundKind::Mutex)
    );
}

#[test]
fn not_held_and_queue_full_have_predicates() {
    let s = Server::start_with(ServerOpts::new().module_args(["max-queue", "1"]));
    let c = Client::open(s.url()).unwrap();
    // NOTHELD: a release by an owner that holds nothing (a guard's unlock reports this
    // as Unlock::Lost; the predicate is for replies seen elsewhere).
    let mut con = s.conn();
    let raw = cmd_str(&mut con, &["DLOCK.RELEASE", "k", "nobody"]).unwrap_err();
    let e = Error::from(raw);
    assert!(e.is_not_held(), "{e:?}");
    assert!(!e.is_wrong_kind() && !e.is_queue_full() && !e.is_deadlock());
    // QUEUEFULL: the one place allowed is taken by another owner.
    let _held = c.fair("q").lock().unwrap();
    assert_eq!(
        cmd_str(&mut con, &["DLOCK.FAIRACQUIRE", "q", "second", "WAIT", "0"]).unwrap(),
        redis::Value::Nil
    );
    let e = std::thread::spawn(move || c.fair("q").try_lock(Duration::ZERO, None))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(e.is_queue_full(), "{e:?}");
    assert_eq!(e.code(), Some("QUEUEFULL"));
    assert!(!e.is_not_held() && !e.is_connection());
}

#[test]
fn without_the_module_the_error_says_how_to_load_it() {
    let s = Server::start_with(ServerOpts::new().no_module());
    let c = Client::open(s.url()).unwrap();
    let e = c.mutex("k").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_unknown_command(), "{e:?}");
    assert!(matches!(&e, Error::UnknownCommand { command, .. } if command == "DLOCK.ACQUIRE"));
    let text = e.to_string();
    for needed in [
        "DLOCK.ACQUIRE",
        "dlock module",
        "MODULE LIST",
        "--loadmodule",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }
    let e = c.latch("l").set(1).unwrap_err();
    assert!(e.is_unknown_command() && e.to_string().contains("DLOCK.LATCHSET"));
    // A command unknown for another reason is not blamed on the module.
    let mut con = s.conn();
    let other = Error::from(cmd_str(&mut con, &["NOSUCHCOMMAND"]).unwrap_err());
    assert!(other.is_unknown_command() && !other.to_string().contains("--loadmodule"));
}

#[tokio::test(flavor = "current_thread")]
async fn the_async_client_has_the_same_typed_errors() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let _held = c.semaphore("k", 2, 1).lock().await.unwrap();
    let e = c
        .rw("k")
        .write()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err();
    assert_eq!(e.found_kind(), Some(FoundKind::Semaphore), "{e}");
    let bare = Server::start_with(ServerOpts::new().no_module());
    let c = AsyncClient::open(bare.url()).unwrap();
    let e = c
        .fair("k")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err();
    assert!(
        e.is_unknown_command() && e.to_string().contains("MODULE LIST"),
        "{e}"
    );
}

/// Issue 45: a zero watchdog lease is refused with advice that fits it ("or None for
/// the watchdog lease" is for an explicit lease, not for the watchdog's own).
#[test]
fn a_zero_lease_gets_advice_that_fits_where_it_was_given() {
    let s = Server::start();
    let o = Options::default().watchdog_lease(Duration::ZERO);
    let watchdog = Client::with_options(s.url(), o).unwrap_err().to_string();
    assert!(watchdog.contains("Options::watchdog_lease"), "{watchdog}");
    assert!(
        !watchdog.contains("None"),
        "a watchdog lease cannot be None: {watchdog}"
    );
    assert!(
        watchdog.contains("renews"),
        "says what the lease is for: {watchdog}"
    );
    let c = Client::open(s.url()).unwrap();
    let explicit = c
        .mutex("k")
        .try_lock(Duration::ZERO, Some(Duration::ZERO))
        .unwrap_err()
        .to_string();
    assert!(
        explicit.contains("or None for the watchdog lease"),
        "an explicit lease may be None: {explicit}"
    );
    let term = Election::new(&c, "e")
        .lease(Duration::ZERO)
        .try_campaign(Some(Duration::ZERO))
        .unwrap_err()
        .to_string();
    assert!(
        term.contains("Election::lease") && !term.contains("None"),
        "{term}"
    );
}

/// Issue 45: `is_wrong_type()` tells a key that holds no lock at all (`WRONGTYPE`) from
/// a lock of another kind; both are wrong kinds.
#[test]
fn a_key_of_another_type_is_a_wrong_type() {
    let s = Server::start();
    cmd_str(&mut s.conn(), &["SET", "str", "x"]).unwrap();
    let c = Client::open(s.url()).unwrap();
    let e = c.mutex("str").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_wrong_type() && e.is_wrong_kind(), "{e:?}");
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert_eq!(e.found_kind(), None);
    assert!(e.to_string().contains("not a dlock lock"), "{e}");
    let _fair = c.fair("f").lock().unwrap();
    let e = c.mutex("f").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_wrong_kind() && !e.is_wrong_type(), "{e:?}");
}
