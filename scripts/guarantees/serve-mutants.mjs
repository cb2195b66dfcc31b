/**
 * The daemon's guarantees (`noa serve`, docs/serve-guarantees.md), each with the test that pins
 * it and its mutant: the guarantee taken out of the built code (edits of dist/src/…, each `from`
 * found exactly once), which must make that test fail. The rows have the shape of
 * scripts/guarantees/mutants.mjs, for its check (a copy of the build without the CLI bundle,
 * dist/src/cli/noa.cjs, so `noa` runs the edited modules).
 */

const BACKPRESSURE = 'test/10-serve/backpressure.test.ts'
const LIFECYCLE = 'test/10-serve/lifecycle.test.ts'
const SECURITY = 'test/10-serve/security.test.ts'
const PROTOCOL = 'test/10-serve/protocol.test.ts'
const FORWARD = 'test/10-serve/forward.test.ts'
const LIMITS =
  'enforces the line, entry, connection and stream limits with NOA_TOO_LARGE / NOA_TOO_MANY_CONNECTIONS'

export const SERVE_MUTANTS = [
  {
    id: 'V-6a',
    test: BACKPRESSURE,
    name: 'at --max-in-flight requests in flight, and reads on as they are answered',
    mutant: 'the pause at --max-in-flight taken out',
    edits: [
      {
        file: 'serve/session.js',
        from: 'if (this.inFlight.size >= this.host.limits.maxInFlight)\n            this.pause(PAUSE_IN_FLIGHT);',
        to: '',
      },
    ],
  },
  {
    id: 'V-6b',
    test: BACKPRESSURE,
    name: 'once all connections together have more than --max-pending-bytes in flight, and reads on once half is answered',
    mutant: 'the pause past --max-pending-bytes taken out',
    edits: [
      {
        file: 'serve/session.js',
        from: 'this.host.budgetWaiters.add(this);\n            this.pause(PAUSE_BUDGET);',
        to: 'this.host.budgetWaiters.add(this);',
      },
    ],
  },
  {
    id: 'V-6c',
    test: BACKPRESSURE,
    name: 'while its answers pile up unread (1 MiB), and reads on once the client takes them',
    mutant: 'the pause at 1 MiB of unread answers taken out',
    edits: [
      {
        file: 'serve/session.js',
        from: 'if (this.outbox.bytes > OUTPUT_HIGH)\n            this.pause(PAUSE_OUTPUT);',
        to: '',
      },
    ],
  },
  {
    id: 'V-6d',
    test: BACKPRESSURE,
    name: 'at --max-in-flight requests in flight, and reads on as they are answered',
    mutant: 'the rest of a read taken as requests past the pause (the bound held per read, not per request)',
    edits: [
      {
        file: 'serve/session.js',
        from: '() => this.paused === 0 && !this.closed)',
        to: '() => !this.closed)',
      },
    ],
  },
  {
    id: 'V-16a',
    test: SECURITY,
    name: 'closes a connection that sends no hello within --hello-timeout-ms, having changed nothing; one that did is kept',
    mutant: 'no hello timeout (the timer does nothing)',
    edits: [
      {
        file: 'serve/session.js',
        from: 'this.helloTimer = setTimeout(() => this.fatal(',
        to: 'this.helloTimer = setTimeout(() => void (',
      },
    ],
  },
  {
    id: 'V-16b',
    test: SECURITY,
    name: 'closes a connection that sends no hello within --hello-timeout-ms, having changed nothing; one that did is kept',
    mutant: 'the hello timer not stopped by the hello',
    edits: [
      {
        file: 'serve/session.js',
        from: "if (this.helloTimer)\n            clearTimeout(this.helloTimer);\n        this.helloTimer = null;\n        this.state = 'open';",
        to: "this.state = 'open';",
      },
    ],
  },
  {
    id: 'V-16c',
    test: SECURITY,
    name: 'closes a connection that sends no hello within --hello-timeout-ms, having changed nothing; one that did is kept',
    mutant: '--hello-timeout-ms ignored: the 10 s default whatever the limit',
    edits: [
      {
        file: 'serve/session.js',
        from: 'const helloMs = host.limits.helloTimeoutMs;',
        to: 'const helloMs = 10000;',
      },
    ],
  },
  {
    id: 'V-17',
    test: LIFECYCLE,
    name: 'ends at once on a second signal (SIGTERM, then SIGINT), losing nothing acknowledged',
    mutant:
      'each signal handler once() on its own (as before the fix): the second signal of the other kind drains again',
    edits: [
      {
        file: 'cli/commands/serve.js',
        from: "process.off('SIGTERM', stop);\n        process.off('SIGINT', stop);\n        void ui?.close();\n        void daemon.drain();",
        to: 'void ui?.close();\n        void daemon.drain();',
      },
      {
        file: 'cli/commands/serve.js',
        from: "process.on('SIGTERM', stop);\n    process.on('SIGINT', stop);",
        to: "process.once('SIGTERM', stop);\n    process.once('SIGINT', stop);",
      },
    ],
  },
  {
    id: 'V-3a',
    test: LIFECYCLE,
    name: 'drains: appends taken are committed and answered, new ones refused with NOA_SHUTTING_DOWN',
    mutant: 'the drain does not wait for the requests in flight',
    edits: [{ file: 'serve/daemon.js', from: 'while (this.stats().requests > 0) {', to: 'while (false) {' }],
  },
  {
    id: 'V-3b',
    test: LIFECYCLE,
    name: 'drains: appends taken are committed and answered, new ones refused with NOA_SHUTTING_DOWN',
    mutant: 'a draining daemon runs new requests instead of refusing them',
    edits: [
      { file: 'serve/session.js', from: 'if (this.host.draining || this.ending) {', to: 'if (false) {' },
    ],
  },
  {
    id: 'V-18',
    test: LIFECYCLE,
    name: 'cancels an append not yet taken into a commit (NOA_ABORTED, nothing written); a taken one commits',
    mutant: 'cancel ignored by the daemon',
    edits: [
      {
        file: 'serve/session.js',
        from: 'r?.abort?.abort(Errors.ABORTED(`request ',
        to: 'void (Errors.ABORTED(`request ',
      },
    ],
  },
  {
    id: 'V-19',
    test: FORWARD,
    name: 'waits for a draining daemon, then appends in process',
    mutant: "a client takes a draining daemon's refusal as final (no wait)",
    edits: [
      {
        file: 'serve/client.js',
        from: "    'NOA_DAEMON_LOST',\n    'NOA_SHUTTING_DOWN',\n]);",
        to: "    'NOA_DAEMON_LOST',\n]);",
      },
    ],
  },
  {
    id: 'V-8',
    test: SECURITY,
    name: "refuses every other user on the socket, a root daemon's and an unprivileged user's (as root: other uids through setpriv)",
    mutant: 'the socket left 0666 (bound under umask 0, chmod 0666)',
    edits: [
      { file: 'serve/daemon.js', from: 'process.umask(0o177)', to: 'process.umask(0)' },
      {
        file: 'serve/daemon.js',
        from: 'chmodSync(this.socketPath, 0o600)',
        to: 'chmodSync(this.socketPath, 0o666)',
      },
    ],
  },
  {
    id: 'V-1',
    test: LIFECYCLE,
    name: 'SIGKILL: no acknowledged entry lost, clients get NOA_DAEMON_LOST, a restarted daemon takes over',
    mutant: 'the requests in flight on a lost connection are never failed (they hang)',
    edits: [
      {
        file: 'serve/connection.js',
        from: 'const lost = this.lost;\n        this.idle?.();\n        for (const [id, w] of this.waiters) {',
        to: 'const lost = this.lost;\n        this.idle?.();\n        for (const [id, w] of []) {',
      },
    ],
  },
  {
    id: 'V-2',
    test: 'test/10-serve/processes.test.ts',
    name: 'the same with the daemon SIGKILLed mid-run and restarted',
    mutant: "an appendMany's acknowledgements answered in the wrong order",
    edits: [
      {
        file: 'serve/requests.js',
        from: 'return log.appendMany(ws, entries, appendOptions(req, signal)).then((acks) => noted(host, ws, acks));',
        to: 'return log.appendMany(ws, entries, appendOptions(req, signal)).then((acks) => noted(host, ws, acks).reverse());',
      },
    ],
  },
  {
    id: 'V-4a',
    test: PROTOCOL,
    name: LIMITS,
    mutant: '--max-entry-bytes not checked on append',
    edits: [
      {
        file: 'serve/requests.js',
        from: "if (size > limits.maxEntryBytes)\n                throw tooLarge('the entry',",
        to: "if (false)\n                throw tooLarge('the entry',",
      },
    ],
  },
  {
    id: 'V-4b',
    test: PROTOCOL,
    name: LIMITS,
    mutant: '--max-connections not checked',
    edits: [
      {
        file: 'serve/daemon.js',
        from: 'if (this.sessions.size >= this.limits.maxConnections) {',
        to: 'if (false) {',
      },
    ],
  },
  {
    id: 'V-4c',
    test: PROTOCOL,
    name: LIMITS,
    mutant: '--max-streams not checked',
    edits: [
      {
        file: 'serve/session.js',
        from: 'if (this.streamSet.size >= this.host.limits.maxStreams) {',
        to: 'if (false) {',
      },
    ],
  },
  {
    id: 'V-5',
    test: PROTOCOL,
    name: 'sends a stream no further than its window until the client asks for more',
    mutant: "a stream's window ignored (it reads on without credit)",
    edits: [
      {
        file: 'serve/session.js',
        from: 'return (r.credits > 0 && this.outbox.waiting',
        to: 'return (true && this.outbox.waiting',
      },
    ],
  },
  {
    id: 'V-7',
    test: PROTOCOL,
    name: 'pipelines: many requests in one write, answered by id, appends committed in the order sent',
    mutant: 'requests of one connection not run in the order they were read (odd ids a turn later)',
    edits: [
      {
        file: 'serve/session.js',
        from: '        else\n            this.run(req, r);\n    }',
        to: '        else if (req.id % 2 === 1)\n            setImmediate(() => this.run(req, r));\n        else\n            this.run(req, r);\n    }',
      },
    ],
  },
  {
    id: 'V-9',
    test: SECURITY,
    name: 'refuses a TCP client without the token, with a wrong one, or with a bad first frame; nothing changes',
    mutant: 'the TCP token not checked',
    edits: [{ file: 'serve/session.js', from: "if (!ok || given === '') {", to: 'if (false) {' }],
  },
  {
    id: 'V-10',
    test: SECURITY,
    name: 'refuses to listen on TCP without a proper token file',
    mutant: 'a token file others can read is taken',
    edits: [{ file: 'serve/daemon.js', from: 'if ((st.mode & 0o077) !== 0) {', to: 'if (false) {' }],
  },
  {
    id: 'V-11',
    test: FORWARD,
    name: 'removes the socket of a killed daemon and opens the root in process, never hanging',
    mutant: 'a stale socket is not removed',
    edits: [
      {
        file: 'serve/paths.js',
        from: 'unlinkSync(socketPath(root));\n        return true;',
        to: 'return true;',
      },
    ],
  },
  {
    id: 'V-12',
    test: FORWARD,
    name: 'refuses, and neither follows nor removes, anything but a socket where the socket goes',
    mutant: 'a symlink where the socket goes is followed as a socket',
    edits: [
      {
        file: 'serve/paths.js',
        from: "if (st.isSocket())\n            return 'socket';",
        to: "if (st.isSocket() || st.isSymbolicLink())\n            return 'socket';",
      },
    ],
  },
  {
    id: 'V-13',
    test: PROTOCOL,
    name: 'refuses a daemon on a root another daemon serves',
    mutant: 'a second daemon goes on without the serve lock',
    edits: [
      {
        file: 'serve/daemon.js',
        from: 'if (Date.now() > until)\n            throw alreadyServed(root);',
        to: 'if (Date.now() > until)\n            return { fd: -1, release() { } };',
      },
    ],
  },
  {
    id: 'V-14',
    test: PROTOCOL,
    name: 'closes the connection on a malformed line, invalid UTF-8 or a reused id, changing nothing',
    mutant: 'an id already in flight is taken again',
    edits: [{ file: 'serve/session.js', from: 'if (this.inFlight.has(req.id))', to: 'if (false)' }],
  },
  {
    id: 'V-15',
    test: FORWARD,
    name: 'gives AgentLog.open on a served root the same results and named errors as in process',
    mutant: "the daemon's errors not rebuilt as NoaErrors by the client (code and details lost)",
    edits: [
      {
        file: 'serve/connection.js',
        from: 'w.reject(deserializeError(msg.error));',
        to: 'w.reject(new Error(msg.error.message));',
      },
    ],
  },
]

/** Each daemon guarantee in the words of docs/serve-guarantees.md (docs/guarantees.md's second column). */
export const SERVE_CLAIMS = {
  'V-1':
    'SIGKILL of the daemon: clients get `NOA_DAEMON_LOST` for what was in flight (never a hang), no acknowledged entry is lost, a restarted daemon takes over.',
  'V-2':
    'Many processes through the daemon, several on one workspace: every acknowledged (ws, seq) exactly once, gapless, also across a SIGKILL and restart.',
  'V-3a': 'A drain (SIGTERM, SIGINT) commits and answers every append it had taken.',
  'V-3b': 'A draining daemon refuses new requests with `NOA_SHUTTING_DOWN`.',
  'V-4a': '`--max-entry-bytes`, refused by name.',
  'V-4b': '`--max-connections`.',
  'V-4c': '`--max-streams`.',
  'V-5': 'A stream sends no more than its window until the client grants more.',
  'V-6a':
    '`--max-in-flight`: the daemon stops reading a connection with that many requests in flight, and reads on as they are answered.',
  'V-6b':
    '`--max-pending-bytes`: past it, over all connections, each connection is read no further after its next request.',
  'V-6c': 'A connection whose answers pile up unread (1 MiB) is read no further until it takes them.',
  'V-6d': 'Those bounds hold at the request that reaches them, not at the end of the read in hand.',
  'V-7': 'The appends of one connection commit in the order they were sent.',
  'V-8':
    'The socket is 0600 whatever the umask: no other user gets through it, whether the daemon runs as root or as an unprivileged user.',
  'V-9': 'TCP needs the token.',
  'V-10': 'TCP is refused with a token file others can read.',
  'V-11': "A killed daemon's stale socket is removed and the root opened in process.",
  'V-12': 'Anything but a socket where the socket goes is refused and left alone.',
  'V-13': 'One daemon per root.',
  'V-14': 'An id already in flight closes the connection, executing nothing.',
  'V-15': 'Through the daemon, the same results and `NoaError`s as in process.',
  'V-16a':
    'A connection that sends no hello within `--hello-timeout-ms` (10 s) is answered `NOA_PROTOCOL` and closed.',
  'V-16b': 'A connection that did say hello is kept.',
  'V-16c': 'The timeout is the limit given.',
  'V-17':
    'A second SIGTERM or SIGINT ends a drain at once, whichever came first, losing nothing acknowledged.',
  'V-18': 'An append cancelled before a commit took it fails `NOA_ABORTED` and is not written.',
  'V-19': 'A client waits for a draining daemon, then uses the root in process.',
}
