/**
 * The mutant of each guarantee in docs/guarantees.md: the guarantee taken out of the built code
 * (edits of dist/src/…, each `from` found exactly once) and the test that must then fail.
 * `npm run test:guarantees` (scripts/guarantees/check.mjs) applies each to a copy of the build
 * and runs its test there, after checking that the test passes on the real build.
 *
 * - `self: true`: the test applies its own mutants (test/02-engine/crash-mutants.test.ts) and
 *   passes only if it catches them; it runs with `--crash` (about 9 minutes; CI runs it in
 *   `npm run test:crash`).
 */

import { SERVE_CLAIMS, SERVE_MUTANTS } from './serve-mutants.mjs'

const CRASH = { NOA_CRASH_MUTANTS: '1' }
const crash = (id, name) => ({
  id,
  test: 'test/02-engine/crash-mutants.test.ts',
  name: `catches: ${name}`,
  mutant: name,
  self: true,
  env: CRASH,
})

/** A trust rule: the in-process case of test/02-engine/journal-trust-checks.test.ts that must fail without it. */
function trust(rows) {
  return rows.map(([id, kase, mutant, edits]) => ({
    id,
    test: 'test/02-engine/journal-trust-checks.test.ts',
    name: `${kase}: nothing of it applied, quarantined with the reason and the workspaces it names`,
    mutant,
    edits,
  }))
}

export const MUTANTS = [
  // Durability: acknowledgements.
  {
    id: 'D-1',
    test: 'test/02-engine/journal-acks.test.ts',
    name: 'every append is acknowledged after its .log write and after the sync that covers it (workers: 0)',
    mutant: "the inline round's journal fdatasync taken out",
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: 'stamp(PHASE.pwritten);\n            this.io.fdatasync(j.fd);',
        to: 'stamp(PHASE.pwritten);',
      },
    ],
  },
  {
    id: 'D-2',
    test: 'test/02-engine/journal-acks.test.ts',
    name: 'every append is acknowledged after its .log write and after the sync that covers it (workers: 1)',
    mutant: 'a pool round written without its fdatasync (sync mode 0)',
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: 'place.offset, SYNC_FDATASYNC, taken.map',
        to: 'place.offset, 0, taken.map',
      },
    ],
  },
  {
    id: 'D-3',
    test: 'test/02-engine/journal-acks.test.ts',
    name: 'every append is acknowledged after its .log write and after the sync that covers it (workers: 1)',
    mutant: 'the inline round acknowledged before its bytes are written to the logs',
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: '        if (error === null) {\n            round.batches.forEach((batch, i) => {',
        to: '        this.roundDone(round, error, null);\n        this.flushAcks();\n        if (error === null) {\n            round.batches.forEach((batch, i) => {',
      },
    ],
  },
  {
    id: 'D-4',
    test: 'test/02-engine/faults.test.ts',
    name: 'every ack comes after an fdatasync of its file',
    mutant: "a file-by-file commit on the owner's thread without its fdatasync",
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: 'this.io.write(batch.file.fd, batch.data);\n            this.io.fdatasync(batch.file.fd);',
        to: 'this.io.write(batch.file.fd, batch.data);',
      },
    ],
  },
  {
    id: 'D-5',
    test: 'test/02-engine/faults.test.ts',
    name: 'every ack comes after an fdatasync of its file',
    mutant: 'a file-by-file commit on the pool without its fdatasync (sync mode 0)',
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: "this.submit({ kind: 'files', batches: [batch] }, batch.file.fd, batch.data, SYNC_FDATASYNC);",
        to: "this.submit({ kind: 'files', batches: [batch] }, batch.file.fd, batch.data, 0);",
      },
    ],
  },
  // Durability: faults.
  {
    id: 'D-6',
    test: 'test/02-engine/journal.test.ts',
    name: 'EIO on the journal fdatasync rejects the round and poisons its workspaces, and only them',
    mutant: 'a failed sync does not poison the workspace',
    edits: [
      { file: 'workers/owner-batch.js', from: 'if (failedSync || cutFailed !== null) {', to: 'if (false) {' },
    ],
  },
  {
    id: 'D-7',
    test: 'test/02-engine/faults.test.ts',
    name: 'a failed fdatasync (EIO) rejects its batch, poisons the workspace until it is reopened (inline)',
    mutant: 'a failed sync does not poison the workspace',
    edits: [
      { file: 'workers/owner-batch.js', from: 'if (failedSync || cutFailed !== null) {', to: 'if (false) {' },
    ],
  },
  {
    id: 'D-8',
    test: 'test/02-engine/journal.test.ts',
    name: 'a log write that fails after the journal sync: acknowledged (durable), written again on recover',
    mutant:
      'a committed round whose log write failed is not written again from the journal (unapplied not set)',
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: '        this.finish(batch, null);\n        file.unapplied = true;',
        to: '        this.finish(batch, null);',
      },
    ],
  },
  {
    id: 'D-9',
    test: 'test/02-engine/journal.test.ts',
    name: 'a failed checkpoint fdatasync keeps the records in the journal until the workspace is reopened',
    mutant: 'a failed checkpoint fdatasync counts as synced',
    edits: [
      {
        file: 'workers/owner-commit.js',
        from: 'syncDone(file, lsn, err) {\n        file.syncing = false;',
        to: 'syncDone(file, lsn, err) {\n        err = null;\n        file.syncing = false;',
      },
    ],
  },
  // Durability: torn tails and corruption.
  {
    id: 'D-10',
    test: 'test/02-engine/agent-log.test.ts',
    name: 'cuts a torn tail at every byte offset of the last line and continues the seq',
    mutant: 'a torn tail is not cut when a workspace is opened',
    edits: [
      { file: 'workers/owner-files.js', from: 'if (tail.validLength < tail.size) {', to: 'if (false) {' },
    ],
  },
  {
    id: 'D-11',
    test: 'test/02-engine/agent-log.test.ts',
    name: 'never cuts a bad complete line: that is corruption, reported with file:line',
    mutant: 'a last complete line that does not parse is taken as seq 0 instead of reported',
    edits: [
      {
        file: 'engine/recovery.js',
        from: 'const line = countLines(file, tail.validLength);',
        to: 'return { lastSeq: 0, lastTs: 0 };',
      },
    ],
  },
  // Journal replay after a crash (the crash-state explorer's mutants).
  crash('J-1', 'recovery skips the replay (journals removed unread)'),
  crash('J-2', "replay starts at the data region's start, not at the header's tail"),
  crash('J-3', 'replay applies a torn frame (its checksum not checked)'),
  crash('J-4', 'replay applies records journal by journal, not in offset order per file'),
  crash('J-5', 'a checkpoint frees frames whose logs are not durable yet'),
  crash('J-6', 'no wrap marker at the old head'),
  crash('J-7', 'the header naming the new tail is not fdatasynced before the space is reused'),
  crash('J-8', "the journal's rename is not fsynced into its folder"),
  crash('J-9', 'a new log is not fsynced into its folder'),
  crash('J-10', "close removes a journal still holding another worker's part of an atomic batch"),
  crash('J-11', 'a checkpoint frees frames whose files written beside entries are not synced'),
  crash('J-12', 'recovery does not put back the files written beside entries'),
  crash('J-13', "a checkpoint's one syncfs of many logs syncs nothing"),
  crash('J-14', 'a close (or making room) marks many logs durable without their syncfs'),
  // Journal trust: a dead journal may do only what noa's writer could have done.
  ...trust([
    [
      'T-1',
      'a symlink to a valid journal',
      'a symlinked journal is followed (stat, open without O_NOFOLLOW)',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'const st = lstatSync(path, { throwIfNoEntry: false });',
          to: 'const st = statSync(path, { throwIfNoEntry: false });',
        },
        {
          file: 'engine/journal-trust.js',
          from: "import { closeSync, constants, fstatSync, lstatSync, readdirSync } from 'node:fs';",
          to: "import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, statSync } from 'node:fs';",
        },
        {
          file: 'engine/journal-trust.js',
          from: "fd = openFileSync(path, constants.O_RDONLY, { what: 'commit journal' });",
          to: 'fd = openSync(path, constants.O_RDONLY);',
        },
      ],
    ],
    [
      'T-2',
      'a plausible forged entry at the end, in a journal owned by another user',
      'the owner check taken out',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'if (euid !== undefined && st.uid !== euid) {',
          to: 'if (false) {',
        },
      ],
    ],
    [
      'T-3',
      'a plausible forged entry at the end, in a journal others can write (0666)',
      'the group/others write check taken out',
      [{ file: 'engine/journal-trust.js', from: 'if ((st.mode & 0o022) !== 0) {', to: 'if (false) {' }],
    ],
    [
      'T-4',
      'a valid journal with a second hard link',
      'the one-link check taken out',
      [{ file: 'engine/journal-trust.js', from: 'if (st.nlink !== 1)', to: 'if (false)' }],
    ],
    [
      'T-5',
      'a journal longer than its header says',
      'the size-as-the-header-says check taken out',
      [{ file: 'engine/journal-trust.js', from: 'if (header.size !== size) {', to: 'if (false) {' }],
    ],
    [
      'T-6',
      'a 3 GiB sparse journal',
      'the 1 GiB bound taken out (file check and scan)',
      [
        { file: 'engine/journal-trust.js', from: 'if (st.size > MAX_JOURNAL_SIZE) {', to: 'if (false) {' },
        { file: 'engine/journal-trust.js', from: 'if (size > MAX_JOURNAL_SIZE) {', to: 'if (false) {' },
      ],
    ],
    [
      'T-7',
      'a record whose target is an absolute path outside the root',
      'a data record may name any target, not only a workspace',
      [{ file: 'engine/journal-trust.js', from: 'if (!isWorkspaceName(r.target)) {', to: 'if (false) {' }],
    ],
    [
      'T-8',
      'a whole-file record climbing out with ..',
      "a whole-file record's path is not checked",
      [
        {
          file: 'engine/journal-trust.js',
          from: 'const problem = filePathProblem(r.target);',
          to: 'const problem = null;',
        },
      ],
    ],
    [
      'T-9',
      'a valid frame holding an unknown record type',
      'a record of an unknown type is accepted (by the frame reader and the record check)',
      [
        {
          file: 'engine/journal-format.js',
          from: 'if (type !== REC_DATA && type !== REC_FILE)',
          to: 'if (false)',
        },
        {
          file: 'engine/journal-trust.js',
          from: 'if (r.type !== REC_FILE)\n        return `a record has unknown type',
          to: 'if (false)\n        return `a record has unknown type',
        },
      ],
    ],
    [
      'T-10',
      'a record over acknowledged bytes (offset 0 rewritten)',
      'a record may change bytes the log holds',
      [{ file: 'engine/journal-trust.js', from: 'if (b !== 0 && b !== r.data[i]) {', to: 'if (false) {' }],
    ],
    [
      'T-11',
      'an entry that does not follow the log (seq skips ahead)',
      'seq need not follow the line before',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'if (last !== null && entry.seq !== last.seq + 1) {',
          to: 'if (false) {',
        },
      ],
    ],
    [
      'T-12',
      'an entry whose ts goes back',
      'ts may go back',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'if (last !== null && entry.ts < last.ts) {',
          to: 'if (false) {',
        },
      ],
    ],
    [
      'T-13',
      'a record that starts inside a line',
      'a record may start inside a line',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'if (r.offset > 0 && !byteIs(fd, r.offset - 1, NL))',
          to: 'if (false)',
        },
      ],
    ],
    [
      'T-14',
      'a record that does not end with a whole line',
      'a record may end inside a line',
      [
        {
          file: 'engine/journal-trust.js',
          from: 'if (r.data.length === 0 || r.data[r.data.length - 1] !== NL)',
          to: 'if (false)',
        },
      ],
    ],
    [
      'T-15',
      'a record beyond the log end',
      "a record may start beyond the log's end",
      [{ file: 'engine/journal-trust.js', from: 'if (r.offset > size)', to: 'if (false)' }],
    ],
    [
      'T-16',
      'a line that is not an entry (an unknown op)',
      'record lines are only parsed as JSON, not checked as entries',
      [
        {
          file: 'engine/journal-trust.js',
          from: "entry = parseEntry(data.toString('utf8', at, nl));",
          to: "entry = JSON.parse(data.toString('utf8', at, nl));",
        },
      ],
    ],
    [
      'T-17',
      'a journal whose record for one log is forged and whose record for another is good',
      "a journal with a bad record still applies its other logs' records",
      [
        {
          file: 'engine/journal-recovery.js',
          from: 'refused = err;\n                break;',
          to: 'continue;',
        },
      ],
    ],
    [
      'T-18',
      'a record over acknowledged bytes (offset 0 rewritten)',
      'every workspace is refused, not only those the journal names',
      [
        {
          file: 'engine/journal-recovery.js',
          from: 'const q = quarantinedJournals(root).find((j) => j.workspaces.includes(workspace));',
          to: 'const q = quarantinedJournals(root)[0];',
        },
      ],
    ],
    [
      'T-19',
      'garbage (no valid header)',
      'an untrusted journal is left where it is (not moved to quarantine)',
      [
        {
          file: 'engine/journal-recovery.js',
          from: 'function quarantine(root, check) {\n    if (check.untrusted.size === 0)',
          to: 'function quarantine(root, check) {\n    if (true)',
        },
      ],
    ],
  ]),
  {
    id: 'T-20',
    test: 'test/02-engine/journal-trust.test.ts',
    name: 'a journal whose trusted records continue the log is still replayed in full',
    mutant: 'a command that only reads replays the dead journals itself (writes the root)',
    edits: [
      {
        file: 'engine/journal-view.js',
        from: 'const check = checkJournals(root, dead);',
        to: 'recoverJournalsLocked(root);\n        return;\n        const check = checkJournals(root, dead);',
      },
      {
        file: 'engine/journal-view.js',
        from: 'import { checkJournals, journalDir,',
        to: 'import { recoverJournalsLocked, checkJournals, journalDir,',
      },
    ],
  },
  {
    id: 'T-21',
    test: 'test/02-engine/journal-trust.test.ts',
    name: 'a journal whose trusted records continue the log is still replayed in full',
    mutant:
      'a command that only reads does not read through a dead journal (shows the log without its journaled rounds)',
    edits: [{ file: 'engine/journal-view.js', from: 'makeViews(root, check, view, valid);', to: ';' }],
  },
  {
    id: 'T-22',
    test: 'test/02-engine/journal-trust.test.ts',
    name: 'a record over acknowledged bytes (offset 0 rewritten): never replayed, quarantined and named, only its workspaces refused',
    mutant: 'an untrusted journal is not named in a warning (NOA_JOURNAL_QUARANTINED)',
    edits: [
      {
        file: 'engine/journal-recovery.js',
        from: 'export function warnUntrusted(q, where) {',
        to: 'export function warnUntrusted(q, where) {\n    return;',
      },
    ],
  },
  {
    id: 'T-23',
    test: 'test/02-engine/journal-trust.test.ts',
    name: "another user's journal in a shared root: quarantined by this user, replayed in full by its owner's recovery",
    mutant: 'recovery (noa recover) does not give a quarantined journal back to replay',
    edits: [
      {
        file: 'engine/journal-recovery.js',
        from: 'export function retryQuarantined(root) {\n    const back = [];',
        to: 'export function retryQuarantined(root) {\n    const back = [];\n    return back;',
      },
    ],
  },
  // gc: it removes only what no log reaches, and nothing a live writer may still name.
  {
    id: 'G-1',
    test: 'test/03-store/gc.test.ts',
    name: 'keeps an aged object a writer stores again (found, not written: freshened) within the grace period',
    mutant: 'an object found already stored is not freshened',
    edits: [{ file: 'store/object-files.js', from: 'utimesSync(this.pathOf(id), now, now);', to: ';' }],
  },
  {
    id: 'G-2',
    test: 'test/03-store/gc.test.ts',
    name: 'dry run by default; removes only what no log reaches and nothing younger than the grace period',
    mutant: 'an unreachable object younger than the grace period is removed',
    edits: [
      {
        file: 'store/gc.js',
        from: 'if (now - st.mtimeMs < graceMs) {\n                result.young++;',
        to: 'if (false) {\n                result.young++;',
      },
    ],
  },
  {
    id: 'G-3',
    test: 'test/03-store/gc.test.ts',
    name: 'keeps an aged object that an entry appended while gc marks names: the logs that grew are read again',
    mutant: 'the logs are not read again before each folder is swept',
    edits: [
      {
        file: 'store/gc.js',
        from: '        await refresh();\n        for (const name of names) {',
        to: '        for (const name of names) {',
      },
    ],
  },
  {
    id: 'G-4',
    test: 'test/03-store/gc.test.ts',
    name: 'dry run by default; removes only what no log reaches and nothing younger than the grace period',
    mutant: 'the blobs of the writes after a workspace head are not marked',
    edits: [
      {
        file: 'store/reach.js',
        from: "if (e.op === 'write')\n                reachBlob(engine.store, sink, e.blob, { workspace, seq: e.seq, path: e.path });",
        to: 'if (false)\n                ;',
      },
    ],
  },
  {
    id: 'G-5',
    test: 'test/03-store/packs.test.ts',
    name: 'gc keeps every pack a reachable tree reads from, and removes the packs only pruned snapshots needed',
    mutant: 'only the first of the packs a kept tree reads from is marked',
    edits: [
      {
        file: 'store/reach.js',
        from: 'for (const id of chain)\n        sink.object',
        to: 'for (const id of chain.slice(0, 1))\n        sink.object',
      },
    ],
  },
  {
    id: 'G-6',
    test: 'test/03-store/gc.test.ts',
    name: 'prune records the drop in the log; gc then frees what only the dropped snapshots held',
    mutant: "a pruned snapshot's tree is still kept",
    edits: [{ file: 'store/reach.js', from: '!info.pruned || record.merged !== undefined', to: 'true' }],
  },
  {
    id: 'G-7',
    test: 'test/03-store/gc.test.ts',
    name: "rewrites a dead writer's log with only its reachable objects; keeps a live one's, and one all reachable",
    mutant: 'an object log whose writer is alive is collected (its flock not tried)',
    edits: [
      {
        file: 'store/gc.js',
        from: 'native.flock(fd, true, true);\n            }\n            catch {\n                result.logsKept++;',
        to: ';\n            }\n            catch {\n                result.logsKept++;',
      },
    ],
  },
  // Bounds and refusals of the engine.
  {
    id: 'D-12',
    test: 'test/02-engine/append-options.test.ts',
    name: 'past maxPendingBytes, an append is not handed to its owner: no commit holds more than the bound',
    mutant: 'maxPendingBytes never holds an append back',
    edits: [
      {
        file: 'engine/agent-log-outbox.js',
        from: 'if (queued || (this.pendingBytes > 0 && this.pendingBytes + bytes > this.maxPendingBytes)) {',
        to: 'if (false) {',
      },
    ],
  },
  {
    id: 'D-13',
    test: 'test/02-engine/append-options.test.ts',
    name: 'an aborted signal cancels an append not yet committed, never one already written',
    mutant: 'an abort is not listened to',
    edits: [
      {
        file: 'engine/agent-log-outbox.js',
        from: "signal.addEventListener('abort', onAbort, { once: true });",
        to: ';',
      },
    ],
  },
  {
    id: 'D-14',
    test: 'test/02-engine/append-options.test.ts',
    name: 'commits only when the last seq is the one expected, and says what it is otherwise',
    mutant: 'ifLastSeq is not compared',
    edits: [
      {
        file: 'workers/owner-batch.js',
        from: 'if (req.expect !== undefined && req.expect !== seq) {',
        to: 'if (false) {',
      },
    ],
  },
  {
    id: 'D-15',
    test: 'test/02-engine/faults.test.ts',
    name: 'refuses a second process on the same workspace, naming it',
    mutant: "a workspace's log is opened without its flock",
    edits: [
      {
        file: 'workers/owner-files.js',
        from: 'file.fd = this.io.openAppend(file.path, false, lock);',
        to: 'file.fd = this.io.openAppend(file.path, false, false);',
      },
      {
        file: 'workers/owner-files.js',
        from: 'file.fd = this.io.openAppend(file.path, true, lock);',
        to: 'file.fd = this.io.openAppend(file.path, true, false);',
      },
    ],
  },
  {
    id: 'D-16',
    test: 'test/02-engine/agent-log.test.ts',
    name: 'works with more workspaces than open files, reopening evicted ones',
    mutant: 'maxOpenFiles is not a bound (there is always room to open)',
    edits: [
      {
        file: 'workers/owner-files.js',
        from: 'const over = this.lru.size + n - max;',
        to: 'const over = 0;',
      },
    ],
  },
  {
    id: 'D-17',
    test: 'test/02-engine/agent-log.test.ts',
    name: 'assigns seq 1, 2, 3 and strictly increasing ts, writes the seed line shape',
    mutant: 'ts is the clock as it is, also when it stalls or steps back',
    edits: [{ file: 'engine/clock.js', from: 'return now > last ? now : last + 1;', to: 'return now;' }],
  },
  {
    id: 'D-18',
    test: 'test/02-engine/agent-log.test.ts',
    name: 'assigns seq 1, 2, 3 and strictly increasing ts, writes the seed line shape',
    mutant: 'a line is written with ts before seq (not the seed line shape)',
    edits: [
      {
        file: 'engine/entry.js',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the text of the built code
        from: 'return `{"seq":${seq},${body},"ts":${ts}}\\n`;',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the text of the built code
        to: 'return `{"ts":${ts},"seq":${seq},${body}}\\n`;',
      },
    ],
  },
  // The ack slot: a lone append's ack without a message back.
  {
    id: 'D-19',
    test: 'test/02-engine/ack-slot.test.ts',
    name: 'serial appends to a worker owner are acknowledged through it, each with its seq and ts, every one in the log',
    mutant: 'the owner never answers through the slot',
    edits: [
      {
        file: 'workers/owner-batch.js',
        from: 'if (this.answerSlot(ACK_SLOT.ack)) {',
        to: 'if (false) {',
      },
    ],
  },
  {
    id: 'D-20',
    test: 'test/02-engine/ack-slot.test.ts',
    name: 'serial appends to a worker owner are acknowledged through it, each with its seq and ts, every one in the log',
    mutant: "the slot carries a seq one past the commit's",
    edits: [
      {
        file: 'workers/owner-batch.js',
        from: 'd[1] = batch.acks[i + 1];',
        to: 'd[1] = batch.acks[i + 1] + 1;',
      },
    ],
  },
  {
    id: 'D-21',
    test: 'test/02-engine/ack-slot.test.ts',
    name: 'an ack that takes longer than the wait comes by the port, once its commit is done',
    mutant: 'a caller that stops waiting does not take the slot back (the owner answers an ack nobody reads)',
    edits: [
      {
        file: 'engine/agent-log-acks.js',
        from: 'v = Atomics.compareExchange(slot, 0, tag, 0);',
        to: 'v = tag;',
      },
    ],
  },
  {
    id: 'D-22',
    test: 'test/02-engine/ack-slot.test.ts',
    name: 'after a wait that ran out, the next 16 lone appends do not wait; then they do again',
    mutant: 'a wait that ran out changes nothing (every lone append waits again)',
    edits: [
      {
        file: 'engine/agent-log-acks.js',
        from: 'owner.slotSkip = LONE_SKIP_AFTER_MISS;',
        to: ';',
      },
    ],
  },
  // A root others can write into.
  {
    id: 'H-1',
    test: 'test/02-engine/hostile-logs.test.ts',
    name: 'a symlink to an outside file with a torn-looking tail is refused by append, read, verify, recover and listed as a problem',
    mutant: 'readers follow symlinks (stat instead of lstat, open without O_NOFOLLOW)',
    edits: [
      {
        file: 'engine/files.js',
        from: 'st = lstatSync(path, { throwIfNoEntry: false });',
        to: 'st = statSync(path, { throwIfNoEntry: false });',
      },
      {
        file: 'engine/files.js',
        from: 'return [path, flags | O_NOFOLLOW | O_NONBLOCK];',
        to: 'return [path, flags | O_NONBLOCK];',
      },
    ],
  },
  {
    id: 'H-2',
    test: 'test/02-engine/hostile-logs.test.ts',
    name: 'a FIFO is refused by append, read, verify, recover and listed as a problem',
    mutant: 'a file is not checked to be a regular file (neither by lstat nor by fstat, sync or async)',
    edits: [
      {
        file: 'engine/files.js',
        from: '    if (!st.isFile()) {\n        await handle.close();\n        throw notRegularFile(path, kindOf(st), options.what);\n    }\n',
        to: '',
      },
      {
        file: 'engine/files.js',
        from: '    if (!st.isFile())\n        throw notRegularFile(path, kindOf(st), what);\n    return st;\n}',
        to: '    return st;\n}',
      },
      {
        file: 'engine/files.js',
        from: '    if (!st.isFile()) {\n        closeSync(fd);\n        throw notRegularFile(path, kindOf(st), what);\n    }\n    return st;',
        to: '    return st;',
      },
    ],
  },
  {
    id: 'H-3',
    test: 'test/02-engine/hostile-logs.test.ts',
    name: 'a symlinked agent-logs folder is refused; nothing is created outside',
    mutant: 'folders below the root are not checked component by component',
    edits: [
      {
        file: 'engine/files.js',
        from: 'export function checkDirsBelow(base, dir) {',
        to: 'export function checkDirsBelow(base, dir) {\n    return null;',
      },
    ],
  },
  {
    id: 'H-4',
    test: 'test/08-cli/hostile.test.ts',
    name: 'a missing root is a named error for read-only commands, and is not created',
    mutant: 'a command that only reads takes a missing root as an empty one',
    edits: [{ file: 'engine/files.js', from: 'if (!mustExist)\n                return;', to: 'return;' }],
  },
  {
    id: 'H-5',
    test: 'test/08-cli/hostile.test.ts',
    name: 'verify checks every healthy log and names each bad one at the end',
    mutant: 'verify does not name a corrupt log among the failures',
    edits: [
      {
        file: 'cli/commands/verify.js',
        from: "        if (!report.ok)\n            problems.push({ file: report.file, code: 'NOA_CORRUPT_LOG', message: describe(report) });\n",
        to: '',
      },
    ],
  },
  {
    id: 'H-6',
    test: 'test/08-cli/hostile.test.ts',
    name: 'refuses invalid UTF-8 with its line and byte offset, writing nothing',
    mutant: "noa append does not check its input's UTF-8",
    edits: [
      { file: 'cli/commands/append.js', from: 'const bad = invalidUtf8(bytes);', to: 'const bad = null;' },
    ],
  },
  {
    id: 'H-7',
    test: 'test/08-cli/hostile.test.ts',
    name: 'umask 022: files 0644 (objects 0444), folders 0755, as before',
    mutant: 'objects keep their write bits',
    edits: [
      { file: 'engine/atomic.js', from: 'fchmodSync(fd, mode & ~0o222);', to: 'fchmodSync(fd, mode);' },
    ],
  },
  {
    id: 'H-8',
    test: 'test/03-store/hostile.test.ts',
    name: 'get streams a large blob byte for byte, and a damaged one yields no bytes',
    mutant: 'a large blob is read out without being hashed first',
    edits: [{ file: 'store/object-blobs.js', from: 'this.checkHash(id, actual, what);', to: ';' }],
  },
  {
    id: 'H-9',
    test: 'test/03-store/checkout.test.ts',
    name: 'never writes outside the folder: hostile paths are refused, named, before anything is written',
    mutant: "a tree's paths are not checked before checkout",
    edits: [{ file: 'store/checkout.js', from: "checkPath(path, 'path');", to: ';' }],
  },
  // Replication: exactly once, in order, durable first.
  {
    id: 'R-1',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'a second publisher for a workspace is refused: by the duplicate check, then by the expected sequence',
    mutant: 'no Nats-Expected-Last-Subject-Sequence on a publish',
    edits: [
      {
        file: 'replicate/link.js',
        from: 'h.set(PubHeaders.ExpectedLastSubjectSequenceHdr, String(lastSubjectSequence));',
        to: ';',
      },
    ],
  },
  {
    id: 'R-2',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'a second publisher for a workspace is refused: by the duplicate check, then by the expected sequence',
    mutant: 'a duplicate acknowledgement is not checked against the stored message',
    edits: [{ file: 'replicate/publisher-exact.js', from: 'if (ack.duplicate) {', to: 'if (false) {' }],
  },
  {
    id: 'R-3',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'a second publisher for a workspace is refused: by the duplicate check, then by the expected sequence',
    mutant: 'no Nats-Msg-Id on a publish',
    edits: [{ file: 'replicate/link.js', from: 'h.set(PubHeaders.MsgIdHdr, msgId);', to: ';' }],
  },
  {
    id: 'R-4',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'fdatasyncs each log before it publishes what it read from it',
    mutant: 'the publisher does not fdatasync a log before publishing from it',
    edits: [{ file: 'replicate/publisher-tail.js', from: 'await local(() => handle.datasync());', to: ';' }],
  },
  {
    id: 'R-5',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'the mirror refuses a gap in the stream and a local log that diverged',
    mutant: 'the mirror does not refuse a gap',
    edits: [
      {
        file: 'replicate/mirror.js',
        from: 'if (seq > expected) {\n            throw Errors.REPLICA_GAP(',
        to: 'if (false) {\n            throw Errors.REPLICA_GAP(',
      },
    ],
  },
  {
    id: 'R-6',
    test: 'test/07-replicate/replicate.test.ts',
    name: 'a publisher whose checkpoint is gone sends nothing twice, also past the de-duplication window',
    mutant:
      'a restarted publisher never reads where the stream is (neither before its first publish nor when the expected sequence refuses it)',
    edits: [
      {
        file: 'replicate/publisher-tail.js',
        from: '            if (!st.reconciled)\n                await this.reconcile(st, null);\n            // Every line about to be published',
        to: '            // Every line about to be published',
      },
      {
        file: 'replicate/publisher-exact.js',
        from: 'await this.reconcile(st, { seq, expected: st.pos.streamSeq });',
        to: 'throw err;',
      },
    ],
  },
  // The framework adapters.
  {
    id: 'A-1',
    test: 'test/10-adapters/langgraph-crash.test.ts',
    name: 'keeps every checkpoint whose put resolved, and goes on after recovery',
    mutant: 'put and putWrites resolve when queued, before their commit',
    edits: [
      {
        file: 'langgraph/thread.js',
        from: 'enqueue(op) {\n        this.queue.push(op);',
        to: 'enqueue(op) {\n        op.resolve();\n        this.queue.push(op);',
      },
    ],
  },
  {
    id: 'A-2',
    test: 'test/10-adapters/langgraph-saver.test.ts',
    name: 'keeps the first regular writes of a retried task, replaces special ones, and writes nothing for a pure retry',
    mutant: "a retried task's regular writes replace the first ones",
    edits: [
      { file: 'langgraph/thread-build.js', from: 'if (w.idx >= 0 && byIdx.has(w.idx))', to: 'if (false)' },
    ],
  },
  {
    id: 'A-3',
    test: 'test/10-adapters/langgraph-unstorable.test.ts',
    name: 'refuses the metadata and the checkpoint too, and a refused put leaves the ones queued with it alone',
    mutant: "what LangGraph's serializer cannot give back is not checked",
    edits: [
      {
        file: 'langgraph/storable.js',
        from: "export function checkStorable(serde, value, type, data, where) {\n    if (!(serde instanceof JsonPlusSerializer) || type !== 'json')",
        to: 'export function checkStorable(serde, value, type, data, where) {\n    if (true)',
      },
    ],
  },
  {
    id: 'A-4',
    test: 'test/10-adapters/langgraph-unstorable.test.ts',
    name: 'a value its serializer cannot read back (stored by another serializer)',
    mutant: "the serializer's error on a stored value is not named (raw error)",
    edits: [
      {
        file: 'langgraph/saver-read.js',
        from: '            return await this.serde.loadsTyped(v.type, data);\n        }\n        catch (err) {\n',
        to: '            return await this.serde.loadsTyped(v.type, data);\n        }\n        catch (err) {\n            throw err;\n',
      },
    ],
  },
  {
    id: 'A-5',
    test: 'test/10-adapters/langgraph-saver.test.ts',
    name: "keeps through noa gc everything a thread reads back: large values and every checkpoint's writes",
    mutant: "the large values a task's writes name are not files of the thread's tree",
    edits: [
      {
        file: 'langgraph/thread-build.js',
        from: '        for (const v of valueBlobs(record)) {\n            if (!state.files.has(valuePath(v)))\n                this.change(state, e, valuePath(v), v);\n        }',
        to: '',
      },
    ],
  },
  {
    id: 'A-6',
    test: 'test/10-adapters/openai-agents-unstorable.test.ts',
    name: 'a Map, naming the item and the path, and writes nothing of the call',
    mutant: 'items are not checked before they are stored (any value goes to JSON.stringify)',
    edits: [
      {
        file: 'openai-agents/items.js',
        from: "    const problem = jsonProblem(item, '', [], []);",
        to: '    const problem = null;',
      },
    ],
  },
  {
    id: 'A-7',
    test: 'test/10-adapters/openai-agents.test.ts',
    name: 'keeps items in order, returns the most recent ones, pops and clears, across instances',
    mutant: 'addItems writes nothing (its entries are dropped)',
    edits: [
      {
        file: 'openai-agents/session.js',
        from: '                    if (entries.length === 0)',
        to: '                    entries.length = 0;\n                    if (entries.length === 0)',
      },
    ],
  },
  // Formats: the files stay what other tools and older noa read.
  {
    id: 'F-1',
    test: 'test/04-transcript/format.test.ts',
    name: 'the writer writes, byte for byte, what Go json.Marshal writes for Norma',
    mutant: "Go's escapes of <, >, & and U+2028/9 left out",
    edits: [
      {
        file: 'gocompat/json.js',
        from: 'return HTML_CHARS.test(json) ? json.replace(HTML_CHARS_G, (c) => HTML_ESCAPES[c]) : json;',
        to: 'return json;',
      },
    ],
  },
  {
    id: 'F-2',
    test: 'test/06-context/format.test.ts',
    name: 'writes state.json as Go MarshalIndent: sorted maps, escaped <>&, no trailing newline',
    mutant: "Go's escapes of <, >, & and U+2028/9 left out",
    edits: [
      {
        file: 'gocompat/json.js',
        from: 'return HTML_CHARS.test(json) ? json.replace(HTML_CHARS_G, (c) => HTML_ESCAPES[c]) : json;',
        to: 'return json;',
      },
    ],
  },
  {
    id: 'F-3',
    test: 'test/05-memory/text.test.ts',
    name: 'renders Norma bytes',
    mutant: 'no blank line between the frontmatter and the body',
    edits: [{ file: 'memory/note.js', from: '`---\\n\\n${trimRightSet(', to: '`---\\n${trimRightSet(' }],
  },
  {
    id: 'F-4',
    test: 'test/03-store/total.test.ts',
    name: 'records without the new fields (made before them) read as before, and encode to the same bytes',
    mutant: "a snapshot record's since and seq written in the other order",
    edits: [
      {
        file: 'store/snapshot-codec.js',
        from: '    o.since = r.since;\n    o.seq = r.seq;',
        to: '    o.seq = r.seq;\n    o.since = r.since;',
      },
    ],
  },
  {
    id: 'F-5',
    test: 'test/03-store/packs.test.ts',
    name: 'reads every snapshot and head as the code that wrote it did, verifies, and gc keeps every object',
    mutant: 'a v1 tree pack is no longer read',
    edits: [
      {
        file: 'store/pack-decode.js',
        from: 'if (magic === PACK_HEADER)\n        return PackV1.decode(',
        to: 'if (false)\n        return PackV1.decode(',
      },
    ],
  },
  // The daemon (noa serve): docs/serve-guarantees.md has the same rows, with how its tests
  // decide without sleeping.
  ...SERVE_MUTANTS,
]

/** Each guarantee in the words of the README and docs/ (docs/guarantees.md's second column). */
export const CLAIMS = {
  ...SERVE_CLAIMS,
  'D-1':
    "An append resolves only once the fdatasync of the journal frame that holds it has returned (a lone round synced on the owner's thread).",
  'D-2': "The same for a round written and synced on the addon's pool.",
  'D-3':
    "The round's bytes reach each `.log` before its appends are acknowledged: readers, `tail -f` and replication see exactly what was acknowledged.",
  'D-4':
    "File by file (`durability: 'fdatasync'`): every ack comes after an fdatasync of its file (the inline commit).",
  'D-5': "The same for a commit on the addon's pool.",
  'D-6':
    "A failed journal fdatasync rejects the round's appends and poisons their workspaces (`NOA_WORKSPACE_POISONED` until `recover`), and only them.",
  'D-7': 'A failed fdatasync file by file poisons the workspace until it is reopened.',
  'D-8':
    'A `.log` write that fails after the journal sync leaves the entries committed: acknowledged, the workspace refuses appends, `recover` writes them again from the journal.',
  'D-9':
    'A failed checkpoint fdatasync poisons that workspace and keeps its journal records until `recover` writes them again.',
  'D-10':
    'Torn tail: a partial last line is cut (ftruncate + fdatasync) when the workspace is opened; seq continues.',
  'D-11': 'A complete line that does not parse is corruption, never cut: the error names `file:line`.',
  'D-12':
    'Backpressure: `maxPendingBytes` bounds the bytes handed to append and not yet acknowledged; past it an append waits.',
  'D-13': 'An `AbortSignal` cancels an append not yet taken into a commit, never one already written.',
  'D-14':
    '`ifLastSeq` commits only when the last seq is the one expected; `NOA_SEQ_MISMATCH` otherwise, nothing written.',
  'D-15': 'One writer per workspace: a second process gets `NOA_WORKSPACE_LOCKED` naming the holder.',
  'D-16': 'Bounded fds: each worker keeps at most `maxOpenFiles / workers` logs open.',
  'D-17': '`ts` is strictly increasing per workspace (last + 1 when the clock stalls or steps back).',
  'D-18': "Log lines keep the seed's shape, keys in its order (`seq` first, `ts` last).",
  'D-19':
    "A lone append to a worker owner is acknowledged through the owner's ack slot (shared memory), not a message back: its caller's thread waits for it at the end of its turn, at most 2 ms.",
  'D-20': "The ack through the slot is the commit's own: its seq and ts, after the same fdatasync.",
  'D-22':
    "After a wait that ran out, the owner's next 16 lone appends do not wait: a disk slower than the wait costs the caller's thread 2 ms per 17 appends at most.",
  'D-21':
    'An ack that takes longer than that wait, or a failure, comes by the port once, never lost: the caller and the owner each take the slot with compareExchange.',
  'J-1':
    'After a crash, whoever next opens the root replays the dead journals before anything else (the crash-state explorer: every acknowledged entry is there in every state a power cut may leave).',
  'J-2': "Replay starts at the header's tail.",
  'J-3': 'A torn frame (checksum not valid) ends the valid prefix; it is never applied.',
  'J-4':
    "The records of all dead journals are applied together, file by file in offset order (an atomic batch's part can be in another worker's journal).",
  'J-5': 'Journal space is reused only after the logs its frames wrote are durable (checkpoint).',
  'J-6': 'A round that wraps writes the marker that sends replay back to the start.',
  'J-7': 'The header naming the new tail is durable before the space before it is reused.',
  'J-8': "A new journal's rename is fsynced into its folder.",
  'J-9': 'A new log is fsynced into its folder before its entries are acknowledged.',
  'J-10':
    "Atomic batches: all or none after any crash; a journal holding another worker's part is kept until that part is durable.",
  'J-11':
    "Files beside entries: a checkpoint syncs them (and their folders) before their frame's space is reused.",
  'J-12': 'Recovery puts a lost file written beside entries back with exactly its bytes.',
  'J-13':
    'A checkpoint that makes many logs durable with one syncfs of their file system frees their frames only once that syncfs has returned without error (on an error, each log is fdatasynced on its own).',
  'J-14':
    'Closing many logs at once (the close, or making room for others) makes them durable with one syncfs before their journal frames can go; on an error, each is fdatasynced before it is closed.',
  'T-1':
    'A planted journal is never followed: a symlink where a journal goes is untrusted, its target never read.',
  'T-2': 'A journal owned by another user is untrusted (quarantined, nothing applied).',
  'T-3': 'A journal writable by its group or others is untrusted (noa creates journals 0600).',
  'T-4': 'A journal with more than one link is untrusted.',
  'T-5': 'A journal whose size is not the one its header says is untrusted.',
  'T-6': 'A journal over 1 GiB is refused at once, in bounded time and memory.',
  'T-7': 'A record names a workspace log by its name, never a path.',
  'T-8':
    "A whole-file record names a path an append may write (normalized, below the root, outside the engine's folders).",
  'T-9': 'A checksum-valid frame must hold only what noa writes (known record types and flags).',
  'T-10':
    'A record changes no byte the log already holds (a zero byte is a hole a power cut left, and is filled).',
  'T-11': 'The records of a log hold entries whose seq follows the line before.',
  'T-12': '… and whose ts never goes back.',
  'T-13': 'A record starts at a line start.',
  'T-14': 'A record holds whole lines.',
  'T-15': "A record starts no further than the log's end.",
  'T-16': "A record's lines are entries that pass the engine's checks.",
  'T-17': 'A journal that breaks any rule is untrusted as a whole: none of it is applied, for any workspace.',
  'T-18':
    'Only the workspaces an untrusted journal names are refused (`NOA_JOURNAL`); every other workspace goes on.',
  'T-19': 'The writer that finds an untrusted journal moves it to `journal/quarantine/` with a note.',
  'T-20':
    'Commands that only read never write the root: they check the dead journals and leave the replay to the next writer.',
  'T-21':
    '… and read a log through a dead journal (a private copy with the records applied), so they show every acknowledged entry.',
  'T-22': 'An untrusted journal is named in a process warning (`NOA_JOURNAL_QUARANTINED`).',
  'T-23':
    "Its owner's recovery (what `noa recover` runs) takes a journal another user left back out of quarantine, checks it and replays it.",
  'G-1':
    "A writer that finds an object already stored freshens its mtime, so gc's grace period starts again.",
  'G-2': 'gc removes no object younger than the grace period (default 1 h).',
  'G-3': 'The logs that grew while gc marked are read again before each folder is swept.',
  'G-4': "gc keeps the blobs of the writes after each workspace's head.",
  'G-5': 'gc keeps every pack a kept tree reads from.',
  'G-6': 'gc no longer keeps what only pruned snapshots held (`noa snapshot prune` decides what goes).',
  'G-7': 'An object log is collected only once its writer is gone (its flock free).',
  'H-1':
    'No symlink is followed below the root: a symlink planted as a log is refused (`NOA_NOT_REGULAR_FILE`), its target never read.',
  'H-2':
    "Only regular files are used: a FIFO, socket or folder under a file's name is refused at once, never a hang.",
  'H-3':
    'Every folder noa walks is checked component by component: a symlinked `agent-logs/` is refused, nothing is created outside.',
  'H-4': 'A command that only reads refuses a root that does not exist (`NOA_BAD_ROOT`) and creates nothing.',
  'H-5':
    'One bad log does not hide the others: whole-root commands go on and name each failure at the end (exit 1).',
  'H-6':
    "Input bytes are kept as given or refused: invalid UTF-8 in `noa append`'s stdin is refused with its line and byte offset.",
  'H-7': 'Modes come from the umask; objects then lose their write bits.',
  'H-8': '`blob get` of a large blob hashes it first, so a damaged one writes nothing.',
  'H-9': 'Checkout never writes outside its folder: every path of the tree is checked first.',
  'R-1':
    "Exactly once, in order: each publish expects the workspace's previous stream sequence, so the server refuses a gap, a reorder or a second writer.",
  'R-2':
    "A duplicate acknowledgement is checked against the stored message: another publisher's entry under the same id is refused.",
  'R-3': 'Each message carries `Nats-Msg-Id: <workspace>:<seq>`.',
  'R-4': 'Durable first: the publisher fdatasyncs the log before it publishes what it read.',
  'R-5': 'The mirror stops with `NOA_REPLICA_GAP` at a gap.',
  'R-6':
    'A restart, after a crash at any point, sends nothing twice and leaves no gap, whatever its checkpoint says.',
  'A-1':
    '`put` and `putWrites` resolve once durable: every checkpoint whose put resolved survives a SIGKILL.',
  'A-2':
    "`putWrites` is idempotent on retry: a task's regular writes are kept the first time, special ones replaced.",
  'A-3':
    "A value LangGraph's serializer cannot give back is refused at `put`/`putWrites` before anything is queued.",
  'A-4': 'Stored bytes the serializer cannot read back are `NOA_CORRUPT_OBJECT`, never its raw error.',
  'A-5': "`noa gc` never removes what a thread reads back (large values are files of the thread's tree).",
  'A-6':
    '`addItems` refuses an item JSON cannot give back, naming it and the path, before anything is written.',
  'A-7':
    '`addItems` is durable when it resolves (one commit per call); items come back in order across instances.',
  'F-1': "Transcripts are byte-compatible with Norma: what Go's `json.Marshal` writes.",
  'F-2': "Context `state.json` is what Norma's Go `MarshalIndent` writes.",
  'F-3': 'Memory notes are the files Norma writes.',
  'F-4':
    'A snapshot record with none of the optional fields has the same bytes (and id) as before they existed.',
  'F-5': 'A root written with v1 tree packs reads as the code that wrote it did.',
}
