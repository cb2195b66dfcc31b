"""Appends, reads and tails a workspace through a running `noa serve`, checking what it gets.

    noa serve --root /tmp/r &
    python3 examples/python/demo.py --root /tmp/r --ws demo
    python3 examples/python/demo.py --host 127.0.0.1 --port 7411 --token-file token --ws demo

Prints one JSON object per step and exits 1 at the first thing that is not as expected (noa's
test suite runs it against a real daemon).
"""

import argparse
import json
import sys
import threading

from noa_client import Client, NoaError


def step(name, **fields):
    print(json.dumps(dict(step=name, **fields)), flush=True)


def check(cond, what):
    if not cond:
        step("failed", what=what)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--token-file")
    ap.add_argument("--ws", default="demo")
    ap.add_argument("--entries", type=int, default=50)
    a = ap.parse_args()

    def connect():
        if a.root:
            return Client.for_root(a.root)
        token = open(a.token_file).read().split("\n")[0] if a.token_file else None
        return Client(host=a.host, port=a.port, token=token)

    c = connect()
    step("hello", v=c.info["v"], transport=c.info["transport"])
    first = c.last_seq(a.ws)

    # Tail: a second connection watches from the next seq while this one appends.
    seen = []
    done = threading.Event()
    want = a.entries + 2

    def tail():
        with connect() as w:
            for entry in w.watch(a.ws, from_seq=first + 1):
                seen.append(entry)
                if len(seen) == want:
                    break
        done.set()

    t = threading.Thread(target=tail, daemon=True)
    t.start()

    ack = c.append(a.ws, {"op": "write", "path": "py/first.txt", "blob": "ab" * 32})
    check(ack["seq"] == first + 1, "first append gets the next seq")
    step("append", seq=ack["seq"])

    # Compare-and-append: a stale expectation is refused with the current last seq.
    try:
        c.append(a.ws, {"op": "delete", "path": "py/never"}, if_last_seq=ack["seq"] - 1)
        check(False, "a stale if_last_seq is refused")
    except NoaError as e:
        check(e.code == "NOA_SEQ_MISMATCH", "NOA_SEQ_MISMATCH, got %s" % e.code)
        check(e.details.get("lastSeq") == ack["seq"], "the error carries the current last seq")
    ok = c.append(a.ws, {"op": "delete", "path": "py/first.txt"}, if_last_seq=ack["seq"])
    check(ok["seq"] == ack["seq"] + 1, "a current if_last_seq commits")
    step("if_last_seq", refused=ack["seq"] - 1, committed=ok["seq"])

    acks = c.append_many_pipelined(a.ws, [{"op": "delete", "path": "py/%d" % i} for i in range(a.entries)])
    seqs = [x["seq"] for x in acks]
    check(seqs == list(range(ok["seq"] + 1, ok["seq"] + 1 + a.entries)), "pipelined appends commit in order")
    step("pipelined", entries=len(acks), last=seqs[-1])

    try:
        c.append(a.ws, {"op": "write", "path": "../escape", "blob": "ab" * 32})
        check(False, "a bad entry is refused")
    except NoaError as e:
        check(e.code == "NOA_BAD_ENTRY", "NOA_BAD_ENTRY, got %s" % e.code)
    try:
        c.append("../x", {"op": "delete", "path": "a"})
        check(False, "a bad workspace name is refused")
    except NoaError as e:
        check(e.code == "NOA_BAD_WORKSPACE", "NOA_BAD_WORKSPACE, got %s" % e.code)
    step("refused", codes=["NOA_BAD_ENTRY", "NOA_BAD_WORKSPACE"])

    entries = list(c.read(a.ws, from_seq=first + 1))
    check([e["seq"] for e in entries] == list(range(first + 1, seqs[-1] + 1)), "read returns every entry in order")
    check(entries[0]["path"] == "py/first.txt", "read returns the entries as appended")
    step("read", entries=len(entries))

    done.wait(30)
    check(done.is_set(), "the watch delivered every entry")
    check([e["seq"] for e in seen] == [e["seq"] for e in entries], "the watch saw exactly what read returns")
    step("watch", entries=len(seen))

    report = c.verify(a.ws)
    check(report["ok"], "the log verifies")
    step("verify", entries=report["entries"], lastSeq=report["lastSeq"])
    c.close()


if __name__ == "__main__":
    main()
