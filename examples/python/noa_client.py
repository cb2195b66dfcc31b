"""A small client for `noa serve`, with nothing but the standard library (Python 3.8+).

    from noa_client import Client, NoaError

    with Client.for_root("/var/lib/noa") as c:           # or Client(host="127.0.0.1", port=7411, token="…")
        ack = c.append("agent-1", {"op": "delete", "path": "src/old.py"})   # {"seq": 1, "ts": …}, durable
        c.append("agent-1", {"op": "delete", "path": "x"}, if_last_seq=ack["seq"])
        for entry in c.read("agent-1", from_seq=1):
            print(entry)
        for entry in c.watch("agent-1", from_seq=ack["seq"] + 1):        # blocks, follows new commits
            print(entry)

The protocol (newline-delimited JSON, version 1) is described in noa's docs/serve.md, section
"Wire protocol". Requests are pipelined: `append_many_pipelined` sends many appends before it
reads any answer. A failed request raises NoaError with the daemon's `code` ("NOA_SEQ_MISMATCH",
"NOA_BAD_ENTRY", …), `message` and `details` (NOA_SEQ_MISMATCH carries details["lastSeq"]).
"""

import json
import os
import socket

PROTOCOL_VERSION = 1
SOCKET_NAME = "noa.sock"


class NoaError(Exception):
    """An error answered by the daemon, or the connection's loss (code NOA_DAEMON_LOST)."""

    def __init__(self, code, message, details=None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.details = details or {}


class Client:
    def __init__(self, socket_path=None, host=None, port=None, token=None, timeout=10.0):
        if socket_path is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = socket_path
        else:
            self._sock = socket.create_connection((host or "127.0.0.1", port), timeout=timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = None
        self._sock.settimeout(timeout)
        if address is not None:
            self._sock.connect(address)
        self._file = self._sock.makefile("rb")
        self._next_id = 1
        # Answers and chunks that arrived for other requests while one was being waited for.
        self._early = {}
        hello = {"op": "hello", "v": PROTOCOL_VERSION}
        if token is not None:
            hello["token"] = token
        self.info = self._call(hello)
        self._sock.settimeout(None)  # watches wait for commits as long as it takes

    @classmethod
    def for_root(cls, root, **kw):
        return cls(socket_path=os.path.join(root, SOCKET_NAME), **kw)

    def close(self):
        try:
            self._file.close()
        finally:
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the wire ---------------------------------------------------------------------------

    def _send(self, msgs):
        data = b"".join(json.dumps(m, separators=(",", ":")).encode("utf-8") + b"\n" for m in msgs)
        self._sock.sendall(data)

    def _request(self, op, **fields):
        rid = self._next_id
        self._next_id += 1
        msg = {"id": rid, "op": op}
        msg.update({k: v for k, v in fields.items() if v is not None})
        return rid, msg

    def _read_message(self):
        line = self._file.readline()
        if not line:
            raise NoaError("NOA_DAEMON_LOST", "the daemon closed the connection")
        msg = json.loads(line.decode("utf-8"))
        if msg.get("id") is None:
            err = msg.get("error") or {}
            raise NoaError(err.get("code", "NOA_PROTOCOL"), err.get("message", ""), err.get("details"))
        return msg

    def _next_for(self, rid):
        """The next message (chunk or answer) for request rid, keeping others for later."""
        queue = self._early.get(rid)
        if queue:
            msg = queue.pop(0)
            if not queue:
                del self._early[rid]
            return msg
        while True:
            msg = self._read_message()
            if msg["id"] == rid:
                return msg
            self._early.setdefault(msg["id"], []).append(msg)

    @staticmethod
    def _result(msg):
        if msg.get("ok"):
            return msg.get("result")
        err = msg.get("error") or {}
        raise NoaError(err.get("code", "ERROR"), err.get("message", ""), err.get("details"))

    def _call(self, msg):
        if "id" not in msg:
            msg = dict(msg, id=self._next_id)
            self._next_id += 1
        self._send([msg])
        return self._result(self._next_for(msg["id"]))

    def _stream(self, op, window=16, **fields):
        rid, msg = self._request(op, window=window, **fields)
        self._send([msg])
        done = False
        try:
            consumed = 0
            while True:
                m = self._next_for(rid)
                if "chunk" not in m:
                    done = True
                    self._result(m)
                    return
                yield m["chunk"]
                consumed += 1
                if consumed >= window // 2:
                    self._send([{"op": "more", "ref": rid, "n": consumed}])
                    consumed = 0
        finally:
            if not done:
                # The caller stopped early: end the stream and drop what is still on its way.
                self._send([{"op": "cancel", "ref": rid}])
                while True:
                    m = self._next_for(rid)
                    if "chunk" not in m:
                        break

    # -- operations -------------------------------------------------------------------------

    def append(self, ws, entry, if_last_seq=None):
        """Appends one entry; returns {"seq", "ts"} once it is durable."""
        _, msg = self._request("append", ws=ws, entry=entry, ifLastSeq=if_last_seq)
        return self._call(msg)

    def append_many(self, ws, entries, if_last_seq=None):
        """Appends entries as one commit with consecutive seqs; returns their acks."""
        _, msg = self._request("appendMany", ws=ws, entries=list(entries), ifLastSeq=if_last_seq)
        return self._call(msg)

    def append_many_pipelined(self, ws, entries):
        """One append request per entry, all sent before any answer is read; returns the acks in order."""
        msgs = [self._request("append", ws=ws, entry=e)[1] for e in entries]
        self._send(msgs)
        return [self._result(self._next_for(m["id"])) for m in msgs]

    def read(self, ws, from_seq=1):
        """Every entry of the workspace from from_seq on, as dicts, then stops."""
        for chunk in self._stream("read", ws=ws, fromSeq=from_seq):
            for entry in chunk:
                yield entry

    def watch(self, ws, from_seq=1):
        """Every entry from from_seq on, then each new one as it commits; never stops by itself.

        On NoaError (NOA_DAEMON_LOST, NOA_SHUTTING_DOWN…) resume with from_seq = last seq seen + 1:
        nothing is missed or repeated.
        """
        for chunk in self._stream("watch", ws=ws, fromSeq=from_seq):
            for entry in chunk:
                yield entry

    def verify(self, ws):
        return self._call(self._request("verify", ws=ws)[1])

    def workspaces(self):
        return self._call(self._request("workspaces")[1])

    def last_seq(self, ws):
        """The workspace's last seq (opens it in the daemon, creating an empty log if there is none)."""
        return self._call(self._request("lastSeq", ws=ws)[1])["lastSeq"]
