//! T7: several processes appending at once never tear or lose a record; T8: a
//! lock holder killed with SIGKILL does not block the next writer.

use std::time::{Duration, Instant};

use crate::common::TestEnv;

#[test]
fn eight_processes_appending_at_once_lose_and_tear_nothing() {
    const PROCS: usize = 8;
    const EACH: usize = 200;
    let env = TestEnv::init();
    // Each process is a shell loop running the real binary EACH times, so the
    // eight loops contend for the ledger lock the whole time.
    let script = format!(
        "i=0; while [ $i -lt {EACH} ]; do \"$0\" checkpoint -m \"$1-$i\" >/dev/null || exit 1; i=$((i+1)); done"
    );
    let start = Instant::now();
    let children: Vec<_> = (0..PROCS)
        .map(|p| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .arg(crate::common::bin())
                .arg(format!("p{p}"))
                .env("CKPT_WORKSPACE", &env.ws)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "an appender failed");
    }
    eprintln!(
        "{} appends by {PROCS} processes in {:?}",
        PROCS * EACH,
        start.elapsed()
    );

    let raw = std::fs::read(env.ledger_path()).unwrap();
    let lines: Vec<&[u8]> = raw
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), PROCS * EACH, "every record present");
    let mut seen = std::collections::HashSet::new();
    let mut last_per_proc = [-1i64; PROCS];
    for (i, l) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_slice(l).expect("no torn or interleaved line");
        assert_eq!(v["seq"], i as u64 + 1, "seq is gap-free");
        let label = v["label"].as_str().unwrap().to_string();
        let (p, j) = label[1..].split_once('-').unwrap();
        let (p, j): (usize, i64) = (p.parse().unwrap(), j.parse().unwrap());
        assert!(j > last_per_proc[p], "per-process order is preserved");
        last_per_proc[p] = j;
        assert!(seen.insert(label), "each record exactly once");
    }
    let r = env.ckpt(&["verify", "--json"]);
    let j = r.json();
    assert_eq!(
        j["ok"], true,
        "chain and checkpoint anchors valid: {}",
        r.stdout
    );
    assert_eq!(j["checkpoints_checked"], (PROCS * EACH) as u64);
}

#[test]
fn a_lock_holder_killed_with_sigkill_does_not_block_the_next_writer() {
    let env = TestEnv::init();
    // The first writer takes the lock and then sleeps inside it.
    let mut holder = env
        .command(&["checkpoint", "-m", "holder"])
        .env("CKPT_FAILPOINTS", "ledger.after_lock=sleep(30000)")
        .spawn()
        .unwrap();
    // Wait until the holder has the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(env.rt().join("ledger.lock"));
        let f = lock.as_ref().ok();
        let held = match f {
            Some(f) => match f.try_lock() {
                Ok(()) => {
                    f.unlock().unwrap();
                    false
                }
                Err(_) => true,
            },
            None => false,
        };
        if held {
            break;
        }
        if Instant::now() > deadline {
            let _ = holder.kill();
            panic!("the holder never took the lock");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let t = Instant::now();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(env.rt().join("ledger.lock"))
        .unwrap();
    loop {
        if f.try_lock().is_ok() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_millis(50),
            "the kernel released the dead holder's lock"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let waited = t.elapsed();
    f.unlock().unwrap();
    let r = env.ckpt(&["checkpoint", "-m", "next"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    eprintln!("lock free {waited:?} after the kill");
    let j = env.ckpt(&["log", "--json"]).json();
    let recs = j["records"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "the killed writer appended nothing");
    assert_eq!(recs[0]["label"], "next");
}

#[test]
fn a_busy_ledger_gives_up_with_a_clear_error() {
    let env = TestEnv::init();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(env.rt().join("ledger.lock"))
        .unwrap();
    f.lock().unwrap();
    let ws = env.open();
    let mut ledger = ws.ledger().clone();
    ledger.set_lock_timeout(Duration::from_millis(200));
    let t = Instant::now();
    let e = ledger
        .append(crate::ledger_torn::call_record(1))
        .unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert!(e.to_string().contains("busy"), "{e}");
    f.unlock().unwrap();
}
