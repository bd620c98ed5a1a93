//! `--replicas N`: a lock counts as taken, and a renewal as done, only once N replicas
//! acknowledged it (WAIT, in the same round trip as the script). A replica that stops answering
//! makes `acquire` give the lock back and fail, `extend` fail, and `run` treat its renewals as
//! failed: the command is stopped before the lease can lapse, as on any other loss.

use std::time::Duration;

use crate::util::{RedisServer, TempDir, send_signal, wait_until};

/// A master and one replica whose first sync is done.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let online = wait_until(Duration::from_secs(20), || {
        master
            .cmd::<String>(&["INFO", "replication"])
            .contains(",state=online,")
    });
    assert!(online, "the replica never synced:\n{}", replica.log());
    (master, replica)
}

#[test]
fn acquire_and_extend_count_only_what_replicas_acknowledged() {
    let (master, replica) = master_and_replica();
    let out = master
        .redlock(&["acquire", "--key", "k", "--ttl", "30s", "--replicas", "1"])
        .run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    assert_eq!(
        replica.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]),
        1,
        "acknowledged, yet not on the replica"
    );
    master
        .redlock(&[
            "extend",
            "--key",
            "k",
            "--token",
            &token,
            "--ttl",
            "30s",
            "--replicas",
            "1",
        ])
        .run()
        .code(0);
    // More replicas than there are: nothing is held afterwards.
    master
        .redlock(&[
            "acquire",
            "--key",
            "other",
            "--ttl",
            "30s",
            "--replicas",
            "2",
        ])
        .run()
        .code(69)
        .one_line_error("only 1 of the 2 replicas asked for are connected; nothing was taken");
    assert_eq!(master.cmd::<i64>(&["EXISTS", "redlock:{other}:holders"]), 0);

    // The replica stopped: the master still counts it connected, but it acknowledges nothing.
    send_signal(replica.pid(), "STOP");
    let extended = master
        .redlock(&[
            "extend",
            "--key",
            "k",
            "--token",
            &token,
            "--ttl",
            "30s",
            "--replicas",
            "1",
        ])
        .run();
    let acquired = master
        .redlock(&[
            "acquire",
            "--key",
            "third",
            "--ttl",
            "30s",
            "--replicas",
            "1",
        ])
        .run();
    let held_after: i64 = master.cmd(&["EXISTS", "redlock:{third}:holders"]);
    send_signal(replica.pid(), "CONT");
    extended
        .code(69)
        .one_line_error("only 0 of the 1 replicas asked for acknowledged the renewal");
    acquired
        .code(69)
        .one_line_error("the lock was taken and given back");
    assert_eq!(held_after, 0, "an unacknowledged lock was kept");

    // A wait retries: once the replica answers again, the lock is taken.
    send_signal(replica.pid(), "STOP");
    let waiting = master
        .redlock(&[
            "acquire",
            "--key",
            "fourth",
            "--ttl",
            "30s",
            "--replicas",
            "1",
            "--wait",
            "20s",
        ])
        .spawn();
    std::thread::sleep(Duration::from_millis(2500));
    send_signal(replica.pid(), "CONT");
    let out = waiting.wait(Duration::from_secs(30));
    out.code(0).stderr_contains("acknowledged");
    assert_eq!(
        replica.cmd::<i64>(&["EXISTS", "redlock:{fourth}:holders"]),
        1
    );

    // The keeper of `acquire --keep-alive` renews with the same condition.
    let out = master
        .redlock(&[
            "acquire",
            "--key",
            "kept",
            "--ttl",
            "1500ms",
            "--replicas",
            "1",
            "--keep-alive",
            "--json",
        ])
        .run();
    out.code(0);
    let keeper = out.json()["keeper_pid"].as_u64().unwrap() as u32;
    let args = std::fs::read(format!("/proc/{keeper}/cmdline")).unwrap_or_default();
    std::thread::sleep(Duration::from_secs(3));
    let kept: i64 = master.cmd(&["EXISTS", "redlock:{kept}:holders"]);
    send_signal(keeper, "TERM");
    assert_eq!(kept, 1, "the keeper did not renew");
    assert!(
        String::from_utf8_lossy(&args).contains("--replicas=1\u{0}"),
        "the keeper renews without --replicas: {:?}",
        String::from_utf8_lossy(&args)
    );
}

#[test]
fn a_run_stops_its_command_when_replicas_stop_acknowledging_renewals() {
    let (master, replica) = master_and_replica();
    let dir = TempDir::new("replicas-run");
    let running = master
        .redlock(&[
            "run",
            "--key",
            "k",
            "--ttl",
            "3s",
            "--replicas",
            "1",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "touch {d}/started; sleep 30; touch {d}/finished",
            d = dir.path().display()
        ))
        .spawn();
    if !wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }) {
        running
            .wait(Duration::from_secs(1))
            .fail("the command did not start");
    }
    send_signal(replica.pid(), "STOP");
    let out = running.wait(Duration::from_secs(20));
    send_signal(replica.pid(), "CONT");
    out.code(125).stderr_contains("replicas");
    assert!(!dir.path().join("finished").exists());
    // Given back (or left to run out): nothing stays held.
    assert!(wait_until(Duration::from_secs(5), || {
        master.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) == 0
    }));
}

/// Repro: with fewer connected replicas than `--replicas` asks for and `--wait`,
/// redlock took and gave back the lock every ~1.5 s for the whole wait: each round blocked
/// other contenders, burned a fence and wrote a `released` history entry for a command that
/// never ran (`--wait 6s`: 4 entries). Now nothing is taken while too few are connected.
#[test]
fn replicas_that_cannot_acknowledge_are_waited_for_without_taking_the_lock() {
    let (master, _replica) = master_and_replica();
    let out = master
        .redlock(&[
            "run",
            "--key",
            "k",
            "--ttl",
            "10s",
            "--replicas",
            "2",
            "--wait",
            "4s",
            "--",
            "true",
        ])
        .run();
    out.code(69)
        .stderr_contains("only 1 of the 2 replicas asked for are connected; nothing was taken");
    assert_eq!(
        master.keys(),
        Vec::<String>::new(),
        "no fence burned, no history written"
    );
}

/// `doctor` on a master with a replica: a warning while the master takes writes its replicas
/// never acknowledged (min-replicas-to-write 0: a failover or a split brain loses locks), ok once
/// it needs one, naming the lag after which a master cut off from them refuses writes.
#[test]
fn doctor_warns_of_a_master_that_writes_without_its_replicas() {
    let (master, _replica) = master_and_replica();
    let replication = |out: &crate::util::Output| -> String {
        out.stdout
            .lines()
            .find(|line| line.split_whitespace().nth(1) == Some("replication"))
            .unwrap_or_else(|| out.fail("no replication line"))
            .to_owned()
    };
    let out = master.redlock(&["doctor"]).run();
    out.code(0);
    let line = replication(&out);
    assert!(line.starts_with("warning "), "{line}");
    assert!(
        line.contains("min-replicas-to-write 0") && line.contains("split brain"),
        "{line}"
    );
    master.cmd::<()>(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    master.cmd::<()>(&["CONFIG", "SET", "min-replicas-max-lag", "2"]);
    let out = master.redlock(&["doctor"]).run();
    out.code(0);
    let line = replication(&out);
    assert!(line.starts_with("ok "), "{line}");
    assert!(line.contains("at most 2 s behind"), "{line}");
}
