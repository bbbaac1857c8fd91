//! The journal's bookkeeping stays bounded by the queue: a lock that never
//! goes idle (always held, always a waiter) while distinct owners queue and
//! leave keeps a queued-owner set the size of its queue, on the master and
//! on a replica applying its deltas.

use dlock_core::*;

#[test]
fn queued_owner_set_is_bounded_while_the_lock_never_goes_idle() {
    let mut master = Lock::new(Kind::Fair);
    let mut t = Tokens::default();
    let holder = Request {
        owner: b"holder",
        mode: Mode::Exclusive,
        lease_ms: 1 << 40,
        waiter: None,
    };
    master.acquire(&holder, 0, &mut t, 0).unwrap();
    master.enqueue(b"first", Mode::Exclusive, 1, true, 1 << 40);
    let mut replica = codec::decode(&codec::encode(&master, 0)).unwrap().0;
    master.journal_reset();
    for i in 0..5_000u64 {
        let owner = format!("owner-{i}");
        // A new owner queues; the one before it times out: the queue
        // never empties.
        master.enqueue(owner.as_bytes(), Mode::Exclusive, 10 + i, false, 100 + i);
        master.tick(99 + i, |_| true);
        assert!(master.waiters().len() <= 3, "{}", master.waiters().len());
        let payload = if master.delta_ok() {
            let mut out = Vec::new();
            codec::encode_delta_into(&master, 0, &mut out);
            out
        } else {
            codec::encode(&master, 0)
        };
        if codec::is_delta(&payload) {
            replica
                .apply_delta(codec::decode_delta(&payload).unwrap())
                .unwrap();
        } else {
            replica = codec::decode(&payload).unwrap().0;
        }
        master.journal_reset();
        assert_eq!(master, replica);
        let bound = 2 * master.waiters().len() + 16;
        assert!(
            master.journal_entries() <= bound,
            "master's journal holds {} entries for {} places after {i} owners",
            master.journal_entries(),
            master.waiters().len()
        );
        assert!(
            replica.journal_entries() <= bound,
            "replica's journal holds {} entries for {} places after {i} owners",
            replica.journal_entries(),
            replica.waiters().len()
        );
    }
}
