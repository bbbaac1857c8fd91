//! Latency histograms (`dlock_core::histogram`).

use dlock_core::histogram::*;

#[test]
fn percentiles_name_the_bucket() {
    let mut h = Histogram::new();
    assert_eq!(h.percentile(50.0), None);
    for _ in 0..90 {
        h.record(200_000);
    }
    for _ in 0..10 {
        h.record(1_000_000);
    }
    let p50 = h.percentile(50.0).unwrap();
    assert!((200_000..=200_000 * 17 / 16).contains(&p50), "{p50}");
    let p99 = h.percentile(99.0).unwrap();
    assert!((1_000_000..=1_000_000 * 17 / 16).contains(&p99), "{p99}");
    assert_eq!(h.percentile(90.0), Some(p50));
    assert_eq!(h.total(), 100);
    let b: Vec<(u64, u64)> = h.buckets().collect();
    assert_eq!(b, vec![(p50, 90), (p99, 10)]);
    h.record(0);
    h.record(u64::MAX);
    assert_eq!(h.buckets().next(), Some((15, 1)));
    let mut m = Histogram::new();
    m.merge(&h);
    m.merge(&h);
    assert_eq!(m.total(), 2 * h.total());
    assert_eq!(m.buckets().next(), Some((15, 2)));
    h.reset();
    assert_eq!(h.total(), 0);
    assert_eq!(h.buckets().count(), 0);
}
