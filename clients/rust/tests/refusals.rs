//! What the client refuses and how its errors read, against real redis-server
//! processes: zero leases (refused before anything is sent, as the Python and Node
//! clients do), the typed error predicates, and the hint when the module is not loaded.

mod support;

use std::time::Duration;

use dlock_client::aio::{AsyncClient, AsyncMultiLock, AsyncRedLock};
use dlock_client::recipes::Election;
use dlock_client::{Client, Error, MultiLock, Options, RedLock};
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
    // A sub-millisecond lease is not zero: it is granted (rounded up to 1 ms).
    assert!(c
        .mutex("tiny")
        .try_lock(Duration::ZERO, Some(Duration::from_micros(300)))
        .unwrap()
        .is_some());

    // The watchdog lease of the options, used when no lease is given.
    let o = Options::default().watchdog_lease(Duration::ZERO);
    let cz = Client::with_options(s.url(), o.clone()).unwrap();
    assert_zero_lease_refused(cz.mutex("w").lock().unwrap_err(), "watchdog_lease");
    assert!(info_nil(&s, "w"));

    // MultiLock: nothing taken.
    let m = MultiLock::new([c.mutex("m1"), c.mutex("m2")]).unwrap();
    assert_zero_lease_refused(m.try_lock(Duration::ZERO, zero).unwrap_err(), "lease");
    assert!(info_nil(&s, "m1") && info_nil(&s, "m2"));

    // RedLock.
    let r = RedLock::open([s.url()], "red").unwrap();
    assert_zero_lease_refused(r.try_lock(Duration::ZERO, zero).unwrap_err(), "lease");
    let rz = RedLock::open_with_options([s.url()], "red", o).unwrap();
    assert_zero_lease_refused(
        rz.try_lock(Duration::ZERO, None).unwrap_err(),
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
    let cz = AsyncClient::with_options(s.url(), o).unwrap();
    let e = cz.mutex("w").lock().await.unwrap_err();
    assert_zero_lease_refused(e, "watchdog_lease");
    assert!(info_nil(&s, "m1") && info_nil(&s, "red") && info_nil(&s, "w"));
}
