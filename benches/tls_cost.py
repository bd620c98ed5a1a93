#!/usr/bin/env python3
"""What TLS costs redlock, measured against plaintext in the same run on the same machine.

Starts a private redis-server listening on a plaintext and a TLS port (certificates made with
openssl in a temporary directory) and measures `redlock run --key K -- true`:
  1. round trips: through a loopback proxy that delays every chunk by --delay-ms each way, the
     extra wall time of TLS over plaintext divided by the round-trip time;
  2. CPU (user + system, of redlock and its child) and wall time per run, without the proxy,
     plain and TLS interleaved, with --tls-ca naming only the private CA, and with a bundle of
     the system's CAs plus it (what a managed Redis with a public certificate costs: the
     system's trust store is read once per process);
  3. the binary's size.

Usage: cargo build --release --target x86_64-unknown-linux-musl
       python3 benches/tls_cost.py [--runs N] [--delay-ms D] [--redlock PATH]
Prints a Markdown table. Nothing here asserts; the numbers go into docs/performance.md.
"""

import argparse
import os
import platform
import queue
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASED = os.path.join(ROOT, "target", "x86_64-unknown-linux-musl", "release", "redlock")
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory):
    """A CA and a server certificate for 127.0.0.1."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bench CA",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=directory)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr", cwd=directory)
    with open(os.path.join(directory, "ext"), "w") as ext:
        ext.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "server.pem", cwd=directory)


class Redis:
    def __init__(self, directory):
        self.port, self.tls_port = free_port(), free_port()
        path = lambda name: os.path.join(directory, name)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--tls-port", str(self.tls_port),
             "--tls-cert-file", path("server.pem"), "--tls-key-file", path("server.key"),
             "--tls-ca-cert-file", path("ca.pem"), "--tls-auth-clients", "no",
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory,
             "--logfile", path("redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.tls_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("redis-server did not start (built without TLS?)")
                time.sleep(0.02)

    def stop(self):
        self.process.kill()
        self.process.wait()


class DelayProxy:
    """Forwards 127.0.0.1:port to target, delaying each chunk by `delay` seconds each way
    (order kept, so pipelined requests stay pipelined). Bounded: stops with the benchmark."""

    def __init__(self, target_port, delay):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.target_port, self.delay = target_port, delay
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, server), (server, client)):
                a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                pending = queue.Queue()
                threading.Thread(target=self.read, args=(a, pending), daemon=True).start()
                threading.Thread(target=self.write, args=(b, pending), daemon=True).start()

    def read(self, source, pending):
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            pending.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def write(self, sink, pending):
        while True:
            due, data = pending.get()
            time.sleep(max(0.0, due - time.monotonic()))
            if not data:
                try:
                    sink.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                sink.sendall(data)
            except OSError:
                return

    def stop(self):
        self.listener.close()


def measure(command, env):
    """Wall ms, and CPU ms of the command and its children."""
    start = time.perf_counter_ns()
    process = subprocess.Popen(command, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = (time.perf_counter_ns() - start) / 1e6
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{command} exited {process.returncode}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--redlock", default=RELEASED)
    args = parser.parse_args()
    if not os.path.exists(args.redlock):
        sys.exit(f"{args.redlock} missing: cargo build --release --target x86_64-unknown-linux-musl")

    with tempfile.TemporaryDirectory(prefix="redlock-tls-") as directory:
        make_pki(directory)
        ca = os.path.join(directory, "ca.pem")
        bundle = os.path.join(directory, "system-and-ca.pem")
        with open(bundle, "w") as out:
            if os.path.exists(SYSTEM_BUNDLE):
                out.write(open(SYSTEM_BUNDLE).read())
            out.write(open(ca).read())
        system_roots = sum(1 for line in open(bundle) if "BEGIN CERTIFICATE" in line)
        redis = Redis(directory)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REDLOCK_", "REDIS_"))}

        def command(port, tls, roots=ca):
            url = f"{'rediss' if tls else 'redis'}://127.0.0.1:{port}"
            extra = ["--tls-ca", roots] if tls else []
            return [args.redlock, "run", "--redis", url, *extra, "--key", "bench", "--", "true"]

        try:
            # 1. Round trips through the delaying proxy.
            rtt = 2 * args.delay_ms
            plain_proxy = DelayProxy(redis.port, args.delay_ms / 1000)
            tls_proxy = DelayProxy(redis.tls_port, args.delay_ms / 1000)
            delayed = {"plain": [], "tls": []}
            for _ in range(5):
                delayed["plain"].append(measure(command(plain_proxy.port, False), env)[0])
                delayed["tls"].append(measure(command(tls_proxy.port, True), env)[0])
            plain_proxy.stop()
            tls_proxy.stop()
            plain_rtts = statistics.median(delayed["plain"]) / rtt
            tls_rtts = statistics.median(delayed["tls"]) / rtt

            # 2. CPU and wall time, interleaved.
            cases = {
                "plaintext": command(redis.port, False),
                "TLS, --tls-ca (1 CA)": command(redis.tls_port, True),
                f"TLS, system trust store ({system_roots} CAs)": command(redis.tls_port, True, bundle),
            }
            results = {name: ([], []) for name in cases}
            for _ in range(args.runs):
                for name, argv in cases.items():
                    wall, cpu = measure(argv, env)
                    results[name][0].append(wall)
                    results[name][1].append(cpu)
        finally:
            redis.stop()

    print(f"Date: {time.strftime('%Y-%m-%d')}; host: {platform.node()}, {os.cpu_count()} CPUs; "
          f"binary: {args.redlock} ({os.path.getsize(args.redlock):,} bytes)")
    print(f"Command: python3 benches/tls_cost.py --runs {args.runs} --delay-ms {args.delay_ms:g}\n")
    print(f"Round trips of `redlock run -- true` (median of 5, proxy delaying {args.delay_ms:g} ms "
          f"each way): plaintext {plain_rtts:.2f} RTT, TLS {tls_rtts:.2f} RTT, "
          f"TLS costs **{tls_rtts - plain_rtts:.2f}** extra round trips.\n")
    print("| `redlock run -- true` | wall p50 | CPU p50 (redlock + child) | CPU over plaintext |")
    print("|---|---|---|---|")
    base = statistics.median(results["plaintext"][1])
    for name, (walls, cpus) in results.items():
        cpu = statistics.median(cpus)
        print(f"| {name} | {statistics.median(walls):.2f} ms | {cpu:.2f} ms | "
              f"{cpu - base:+.2f} ms |")


if __name__ == "__main__":
    main()
