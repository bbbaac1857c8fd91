//! Leader election: run it in a few terminals against `make run`; one leads (and
//! proclaims its name), the others wait in line; kill the leader and the next leads at
//! once (BIND). Every process prints the leader changes it observes.
//!
//! ```sh
//! cargo run --release -p dlock-client --example leader -- node-a
//! cargo run --release -p dlock-client --example leader -- node-b redis://127.0.0.1:6379/
//! ```

use std::time::Duration;

use dlock_client::recipes::Election;
use dlock_client::Client;

fn main() -> Result<(), dlock_client::Error> {
    let mut args = std::env::args().skip(1);
    let me = args.next().unwrap_or_else(|| "node".into());
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let client = Client::open(url.as_str())?;
    let election = Election::new(&client, "demo-leader")
        .owner(me.clone())
        .bind(true);
    let watcher = election.clone();
    let who = me.clone();
    std::thread::spawn(move || -> Result<(), dlock_client::Error> {
        for state in watcher.observe()? {
            println!("[{who}] leader now: {:?}", state?);
        }
        Ok(())
    });
    loop {
        let term = election.campaign()?;
        println!("[{me}] I lead (term token {})", term.token());
        term.proclaim(&format!("{me} is the leader"))?;
        match term.lost_signal().wait_timeout(Duration::from_secs(5)) {
            Some(reason) => println!("[{me}] leadership lost: {reason:?}"),
            None => {
                term.resign()?;
                println!("[{me}] resigned; back in line");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
