//! A replica of one lock key, kept in step with its master the way the
//! command layer replicates: [`Replica::sync`] after every commit.

use super::raw::{lock_from_parts, size_of};
use dlock_core::codec;
use dlock_core::*;

/// A replica's copy of one lock key, kept in step by [`Replica::sync`].
#[derive(Default)]
pub struct Replica {
    pub lock: Option<Lock>,
    /// Commits replicated as a delta / as the whole state.
    pub deltas: u64,
    pub fulls: u64,
    /// Bytes of the deltas sent, and of the full payloads they stood for.
    pub delta_bytes: u64,
    pub full_bytes_saved: u64,
}

impl Replica {
    /// The command layer's commit of `master` (`None`: the key has no
    /// lock): replicate a delta when the journal allows, else the whole
    /// state, apply it here, compare, and reset the master's journal.
    pub fn sync(&mut self, master: Option<&mut Lock>, floor: u64) -> Result<(), String> {
        let master = match master {
            Some(l) if l.is_empty() => {
                // The key is deleted (an empty payload); a lock made
                // there later is a new lock, with a new journal (the
                // fuzzers go on with its kind, size and last token).
                *l = lock_from_parts(
                    l.kind(),
                    l.last_token(),
                    size_of(l),
                    vec![],
                    Default::default(),
                );
                None
            }
            m => m,
        };
        let Some(master) = master else {
            self.lock = None;
            return Ok(());
        };
        let full = codec::encode(master, floor);
        if master.delta_ok() {
            let mut delta = Vec::new();
            codec::encode_delta_into(master, floor, &mut delta);
            let replica = self
                .lock
                .as_mut()
                .ok_or("a delta for a key the replica has no lock at")?;
            let d = codec::decode_delta(&delta).map_err(|e| format!("delta refused: {e:?}"))?;
            let got_floor = replica
                .apply_delta(d)
                .map_err(|e| format!("delta does not apply: {e:?}"))?;
            if got_floor != floor {
                return Err("delta changed the token floor".into());
            }
            if codec::encode(replica, floor) != full {
                return Err(format!(
                    "replica diverged after a delta:\nmaster {master:?}\nreplica {replica:?}"
                ));
            }
            self.deltas += 1;
            self.delta_bytes += delta.len() as u64;
            self.full_bytes_saved += full.len() as u64;
        } else {
            let (l, f) = codec::decode(&full).map_err(|e| format!("full refused: {e:?}"))?;
            // (Compared encoded: a bound hold's connection id is not sent.)
            if f != floor || codec::encode(&l, f) != full {
                return Err("full payload does not round-trip".into());
            }
            self.lock = Some(l);
            self.fulls += 1;
        }
        master.journal_reset();
        Ok(())
    }
}
