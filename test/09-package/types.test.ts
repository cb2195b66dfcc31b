/**
 * The public types, pinned the way tsd pins them (sonic-boom's `types/index.test-d.ts`): each
 * assertion below is checked by `npm run typecheck` (tsc over test/), and each `@ts-expect-error`
 * line must stay an error. Imports go through the package's own name, so they resolve through the
 * `types` conditions of package.json `exports`, as a user's do. At run time the file holds one
 * trivial test: everything it checks is checked by the compiler.
 */
import type {
  Ack,
  AgentLog,
  AgentLogOptions,
  AppendOptions,
  Durability,
  Entry,
  EntryInput,
  ForkResult,
  isNoaError,
  MergeOptions,
  MergeResult,
  NOA_ERROR_CODES,
  NoaError,
  NoaErrorCode,
  NoaErrorDetails,
  ObjectStore,
  Op,
  SnapshotEngine,
  SnapshotEngineOptions,
  SnapshotResult,
  VerifyReport,
  WorkspaceInfo,
  WorkspaceState,
} from 'noa'
import type { CompressionState, ContextSession, ContextSessionOptions } from 'noa/context'
import type { loadNative, NativeIo, readWorkspace } from 'noa/engine'
import type { goToLower } from 'noa/gocompat'
import type { MemoryNote, MemoryStore, RecallHit } from 'noa/memory'
import type { PullOptions, PushOptions, PushReport, replicatePush } from 'noa/replicate'
import type { diffTrees, Tree, TreeChange } from 'noa/store'
import type { loadTranscript, Message, Transcript, TranscriptRecord, TranscriptWriter } from 'noa/transcript'
import { describe, expectTypeOf, it } from 'vitest'

describe('public types', () => {
  it('are checked by the compiler', () => {
    // AgentLog: open, append one or many, read back, close.
    expectTypeOf<AgentLog['append']>().parameters.toEqualTypeOf<
      [workspace: string, entry: EntryInput, options?: AppendOptions]
    >()
    expectTypeOf<ReturnType<AgentLog['append']>>().toEqualTypeOf<Promise<Ack>>()
    expectTypeOf<ReturnType<AgentLog['appendMany']>>().toEqualTypeOf<Promise<Ack[]>>()
    expectTypeOf<ReturnType<AgentLog['read']>>().toEqualTypeOf<AsyncGenerator<Entry>>()
    expectTypeOf<ReturnType<AgentLog['watch']>>().toEqualTypeOf<AsyncGenerator<Entry>>()
    expectTypeOf<ReturnType<AgentLog['verify']>>().toEqualTypeOf<Promise<VerifyReport>>()
    expectTypeOf<ReturnType<AgentLog['workspaces']>>().toEqualTypeOf<Promise<WorkspaceInfo[]>>()
    expectTypeOf<ReturnType<(typeof AgentLog)['open']>>().toEqualTypeOf<Promise<AgentLog>>()
    expectTypeOf<Parameters<(typeof AgentLog)['open']>>().toEqualTypeOf<[options?: AgentLogOptions]>()
    expectTypeOf<AgentLogOptions['durability']>().toEqualTypeOf<Durability | undefined>()
    expectTypeOf<Durability>().toEqualTypeOf<'journal' | 'fdatasync'>()
    expectTypeOf<AppendOptions['ifLastSeq']>().toEqualTypeOf<number | undefined>()
    expectTypeOf<AppendOptions['signal']>().toEqualTypeOf<AbortSignal | undefined>()
    expectTypeOf<Ack>().toEqualTypeOf<{ seq: number; ts: number }>()
    expectTypeOf<Op>().toEqualTypeOf<'write' | 'delete' | 'rename' | 'snapshot' | 'merge'>()
    expectTypeOf<Entry>().toMatchTypeOf<{ seq: number; ts: number; op: Op }>()
    expectTypeOf<{ op: 'write'; path: string; blob: string }>().toMatchTypeOf<EntryInput>()
    expectTypeOf<{ op: 'rename'; from: string; to: string }>().toMatchTypeOf<EntryInput>()
    // @ts-expect-error a write needs its blob
    expectTypeOf<{ op: 'write'; path: string }>().toMatchTypeOf<EntryInput>()
    // @ts-expect-error there is no such op
    expectTypeOf<{ op: 'truncate'; path: string }>().toMatchTypeOf<EntryInput>()

    // SnapshotEngine: snapshot, replay, fork, merge over an ObjectStore.
    expectTypeOf<SnapshotEngine['store']>().toEqualTypeOf<ObjectStore>()
    expectTypeOf<SnapshotEngine['log']>().toEqualTypeOf<AgentLog | undefined>()
    expectTypeOf<ConstructorParameters<typeof SnapshotEngine>>().toEqualTypeOf<
      [options?: SnapshotEngineOptions]
    >()
    expectTypeOf<ReturnType<SnapshotEngine['snapshot']>>().toEqualTypeOf<Promise<SnapshotResult>>()
    expectTypeOf<ReturnType<SnapshotEngine['replay']>>().toEqualTypeOf<Promise<WorkspaceState>>()
    expectTypeOf<ReturnType<SnapshotEngine['fork']>>().toEqualTypeOf<Promise<ForkResult>>()
    expectTypeOf<SnapshotEngine['merge']>().parameters.toEqualTypeOf<
      [target: string, sources: readonly string[], options?: MergeOptions]
    >()
    expectTypeOf<ReturnType<SnapshotEngine['merge']>>().toEqualTypeOf<Promise<MergeResult>>()
    expectTypeOf<MergeOptions['onConflict']>().toEqualTypeOf<'lww' | 'fail' | undefined>()
    expectTypeOf<WorkspaceState['tree']>().toEqualTypeOf<Tree>()
    expectTypeOf<ReturnType<ObjectStore['putBlob']>>().toEqualTypeOf<Promise<string>>()
    expectTypeOf<ReturnType<ObjectStore['getBlob']>>().toEqualTypeOf<Promise<Buffer>>()
    expectTypeOf<ReturnType<ObjectStore['getTree']>>().toEqualTypeOf<Promise<Tree>>()
    expectTypeOf<ReturnType<typeof diffTrees>>().toMatchTypeOf<Iterable<TreeChange>>()

    // NoaError: one class, a closed set of string codes, details by field.
    expectTypeOf<NoaError>().toMatchTypeOf<Error>()
    expectTypeOf<NoaError['code']>().toEqualTypeOf<NoaErrorCode>()
    expectTypeOf<NoaError['details']>().toEqualTypeOf<NoaErrorDetails>()
    expectTypeOf<(typeof NOA_ERROR_CODES)[number]>().toEqualTypeOf<NoaErrorCode>()
    expectTypeOf<'NOA_BAD_ENTRY'>().toMatchTypeOf<NoaErrorCode>()
    // @ts-expect-error codes are a closed set
    expectTypeOf<'NOA_NO_SUCH_CODE'>().toMatchTypeOf<NoaErrorCode>()
    expectTypeOf<typeof isNoaError>().guards.toEqualTypeOf<NoaError>()
    expectTypeOf<NoaErrorDetails['workspace']>().toEqualTypeOf<string | undefined>()

    // noa/engine: reading without an owner, and the addon's interface.
    expectTypeOf<ReturnType<typeof readWorkspace>>().toEqualTypeOf<AsyncGenerator<Entry>>()
    expectTypeOf<ReturnType<typeof loadNative>>().toEqualTypeOf<NativeIo>()
    expectTypeOf<NativeIo['fdatasync']>().toBeFunction()

    // noa/gocompat
    expectTypeOf<typeof goToLower>().toEqualTypeOf<(s: string) => string>()

    // noa/transcript
    expectTypeOf<ReturnType<TranscriptWriter['recordMessage']>>().toEqualTypeOf<Promise<TranscriptRecord>>()
    expectTypeOf<ReturnType<typeof loadTranscript>>().toMatchTypeOf<Promise<Transcript> | Transcript>()
    // A role Norma does not know is kept, not refused.
    expectTypeOf<'user'>().toMatchTypeOf<Message['role']>()
    expectTypeOf<'tool'>().toMatchTypeOf<Message['role']>()

    // noa/memory
    expectTypeOf<ConstructorParameters<typeof MemoryStore>>().toEqualTypeOf<[dir: string]>()
    expectTypeOf<ReturnType<MemoryStore['recall']>>().toEqualTypeOf<RecallHit[]>()
    expectTypeOf<ReturnType<MemoryStore['scan']>>().toEqualTypeOf<MemoryNote[]>()

    // noa/context
    expectTypeOf<(typeof ContextSession)['open']>().parameters.toEqualTypeOf<
      [options: ContextSessionOptions]
    >()
    expectTypeOf<ReturnType<ContextSession['snapshot']>>().toEqualTypeOf<CompressionState>()

    // noa/replicate
    expectTypeOf<typeof replicatePush>().toEqualTypeOf<(options: PushOptions) => Promise<PushReport>>()
    expectTypeOf<PullOptions>().toHaveProperty('root')
  })
})
