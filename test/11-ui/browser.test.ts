/**
 * noa ui in a real browser: headless Chromium (Debian's package) driven by playwright-core, on a
 * root made through the library (snapshots, a fork, a merge with a conflict, a transcript,
 * memory notes, a compressed context), against `noa ui` in its own process. Each view is
 * checked against the CLI's `--json` output; entries appended while the log is open arrive; a
 * snapshot leads to its tree, a file and a diff; strings carrying HTML are shown as text, open
 * no dialog and send no request. The same run takes the screenshots of docs/ui.md
 * (NOA_UI_SCREENSHOTS=1 writes them into docs/ui/).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Annotation, END, START, StateGraph } from '@langchain/langgraph'
import { type Browser, chromium, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ContextSession } from '../../dist/src/context/index.js'
import {
  loadTranscript,
  messages,
  TranscriptWriter,
  transcriptPath,
} from '../../dist/src/entries/transcript.js'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { MemoryStore } from '../../dist/src/memory/index.js'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { saveCheckpoint } from '../../dist/src/replicate/checkpoint.js'
import { CHROMIUM_INSTALL, chromiumBinary, startUi, type UiProcess } from '../helpers/browser.js'
import { ROOT_DIR, runCli } from '../helpers/index.js'

const CHROMIUM = chromiumBinary()
if (!CHROMIUM)
  console.warn(`test/11-ui: no chromium found, the browser tests are skipped: ${CHROMIUM_INSTALL}`)

/** What an attacker would have an agent write: markup that runs script if taken as HTML. */
const IMG = '<img src=x onerror=alert(1)>'
const SCRIPT = '</script><script>alert(2)</script>'
const HOSTILE = `${IMG} ${SCRIPT}`
const HOSTILE_PATH = `</script><img src=x onerror=alert(3)>.md`

const SHOTS = process.env.NOA_UI_SCREENSHOTS === '1' ? join(ROOT_DIR, 'docs', 'ui') : null

describe.skipIf(!CHROMIUM)('noa ui in a browser', () => {
  let root: string
  let ui: UiProcess
  let browser: Browser
  let page: Page
  const dialogs: string[] = []
  const requests: string[] = []
  let snapshots: { first: string; merge: string }
  let checkpointIds: string[]
  let items: unknown[]

  const cli = (args: string[]) => {
    const r = runCli([...args, '--json'])
    expect(r.status, r.stderr).toBe(0)
    return r.stdout
  }
  const go = async (hash: string) => {
    await page.goto(`${ui.base}/${hash}`)
  }
  const shot = async (name: string) => {
    const file = join(SHOTS ?? join(root, 'shots'), `${name}.png`)
    await page.screenshot({ path: file })
  }

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'noa-ui-'))
    mkdirSync(join(root, 'shots'))
    if (SHOTS) mkdirSync(SHOTS, { recursive: true })
    const store = new ObjectStore(root)
    const log = await AgentLog.open({ root, objects: store })
    const engine = new SnapshotEngine({ log, store })
    const put = (s: string | Buffer) => store.putBlob(s)
    const readme = await put('# demo\n\nfirst line\n')
    for (const ws of ['agent-1', 'agent-2', 'agent-3']) {
      await log.appendMany(
        ws,
        Array.from({ length: 40 }, (_, i) => ({
          op: 'write' as const,
          path: `src/f${i % 7}.ts`,
          blob: readme,
        })),
      )
    }
    await log.appendMany('main', [
      { op: 'write', path: 'README.md', blob: readme },
      { op: 'write', path: 'data.bin', blob: await put(Buffer.from([0, 1, 2, 0xff, 0xfe])) },
      { op: 'write', path: HOSTILE_PATH, blob: await put(`${HOSTILE}\n`) },
    ])
    const first = await engine.snapshot('main', { message: 'first' })
    await engine.fork('feature', first.snapshotId as string, { message: 'try a feature' })
    await log.appendMany('feature', [
      { op: 'write', path: 'notes.md', blob: await put('# notes\n') },
      { op: 'write', path: 'README.md', blob: await put('# demo\n\nfrom the feature\n') },
    ])
    await log.appendMany('main', [
      { op: 'write', path: 'README.md', blob: await put('# demo\n\nfirst line, edited\n') },
      { op: 'delete', path: HOSTILE_PATH },
    ])
    const merged = await engine.merge('main', ['feature'], { message: 'take the notes' })
    snapshots = { first: first.snapshotId as string, merge: merged.snapshotId as string }

    // Agent files with hostile text: a transcript, a memory note, a compressed context block.
    const transcripts = join(root, 'transcripts')
    const w = new TranscriptWriter({ dir: transcripts, sessionId: 'xss-session', log })
    await w.recordMessage({ role: 'user', content: [{ type: 'text', text: `Please read ${HOSTILE}` }] })
    await w.recordMessage(
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: `thinking about ${IMG}`, signature: 'sig' },
          { type: 'tool_use', id: 'toolu_1', name: 'Read', input: JSON.stringify({ path: HOSTILE_PATH }) },
        ],
      },
      { input_tokens: 120, output_tokens: 30 },
    )
    await w.recordMessage({
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_1',
          content: [
            {
              type: 'text',
              text: `file says ${SCRIPT}\n${Array.from({ length: 250 }, (_, i) => `line ${i} of the file read`).join('\n')}`,
            },
          ],
          is_error: false,
        },
      ],
    })
    const summary = Array.from({ length: 300 }, (_, i) => `point ${i}: what the file says there`).join('\n')
    await w.recordMessage({
      role: 'assistant',
      content: [{ type: 'text', text: `Done reading.\n${summary}` }],
    })
    for (const text of ['Thanks.', 'Anything else?', 'No, that is all.', 'Bye.'])
      await w.recordMessage({
        role: text.startsWith('No') ? 'assistant' : 'user',
        content: [{ type: 'text', text }],
      })
    await w.close()
    new MemoryStore(join(root, 'memory')).save({
      name: 'Hostile note',
      description: `a note with ${IMG}`,
      type: 'project',
      content: `remember ${SCRIPT}\n`,
    })
    const t = await loadTranscript(transcriptPath(transcripts, 'xss-session'))
    const session = ContextSession.open({ baseDir: join(root, 'context'), sessionId: 'xss-session' })
    const c = session.compress(messages(t.records).messages, [
      { startRef: 'm00001', endRef: 'm00004', summary: `read a file: ${HOSTILE}`, topic: 'reading' },
    ])
    expect(c.result.errors).toEqual([])
    await log.close()

    // A LangGraph thread and an Agents session, through the adapters.
    const State = Annotation.Root({
      steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
    })
    const saver = await NoaSaver.open({ root })
    const graph = new StateGraph(State)
      .addNode('plan', () => ({ steps: [`plan ${IMG}`] }))
      .addNode('act', () => ({ steps: ['act'] }))
      .addEdge(START, 'plan')
      .addEdge('plan', 'act')
      .addEdge('act', END)
      .compile({ checkpointer: saver })
    const thread = { configurable: { thread_id: 'chat-1' } }
    await graph.invoke({ steps: ['start'] }, thread)
    checkpointIds = []
    for await (const t of saver.list(thread)) checkpointIds.push(t.checkpoint.id)
    await saver.close()
    const agents = new NoaSession({ root, sessionId: 'customer-42' })
    await agents.addItems([
      { role: 'user', content: `My order is late ${HOSTILE}` },
      { role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Let me check.' }] },
    ] as never)
    items = await agents.getItems()
    await agents.close()

    ui = await startUi(['ui', '--root', root, '--port', '0'])
    browser = await chromium.launch({ executablePath: CHROMIUM as string, args: ['--no-sandbox'] })
    const context = await browser.newContext({ viewport: { width: 1280, height: 760 } })
    page = await context.newPage()
    page.on('dialog', (d) => {
      dialogs.push(d.message())
      void d.dismiss()
    })
    page.on('request', (r) => {
      requests.push(r.url())
    })
    // The URL printed: the token goes into a cookie, and out of the address bar.
    await page.goto(ui.url)
    expect(page.url()).toBe(`${ui.base}/`)
  })

  afterAll(async () => {
    await browser?.close()
    await ui?.stop()
    if (root) rmSync(root, { recursive: true, force: true })
  })

  it('overview: every workspace with the entries and last seq `noa workspaces --json` gives', async () => {
    const expected = JSON.parse(cli(['workspaces', '--root', root])) as {
      workspace: string
      entries: number
      lastSeq: number
    }[]
    // A push checkpoint 10 entries short of agent-2's last: the overview says how far behind.
    saveCheckpoint(root, {
      version: 1,
      kind: 'push',
      prefix: 'noa',
      stream: 'NOA',
      streamCreated: '2026-12-07T00:00:00Z',
      savedAt: '2026-12-07T00:00:00Z',
      workspaces: { 'agent-2': { seq: 30, ts: 1, offset: 0, streamSeq: 30 } },
    })
    await go('#/')
    await page.locator('[data-ws]').first().waitFor()
    // The names come first, the figures when the full listing arrives.
    const rows = () =>
      page
        .locator('[data-ws]')
        .evaluateAll((els) =>
          els.map((el) => [...el.querySelectorAll('.cell')].map((c) => c.textContent ?? '')),
        )
        .then((all) => all.map((r) => [r[0], Number(r[1]), Number(r[2])]))
    await expect.poll(rows).toEqual(expected.map((w) => [w.workspace, w.entries, w.lastSeq]))
    await expect
      .poll(() => page.locator('[data-ws="agent-2"] [data-replication="push.noa"]').textContent())
      .toBe('push 10 behind')
    await shot('overview')
    // Filtering and sorting are in the URL.
    await page.getByLabel('filter').fill('agent')
    await expect.poll(() => page.locator('[data-ws]').count()).toBe(3)
    expect(page.url()).toContain('filter=agent')
    await page.locator('[data-sort="lastSeq"]').click()
    expect(page.url()).toContain('sort=lastSeq')
  })

  it('a workspace: its log as `noa log --json` prints it, and entries appended while it is open arrive', async () => {
    const lines = cli(['log', 'agent-1', '--root', root]).trim().split('\n')
    const last = JSON.parse(lines.at(-1) as string) as { seq: number; op: string }
    await go('#/ws/agent-1')
    const row = (seq: number) => page.locator(`[data-seq="${seq}"]`)
    await expect.poll(() => row(last.seq).locator('.cell').nth(2).textContent()).toBe(last.op)
    await expect.poll(() => page.getByTestId('live').getAttribute('class')).toContain('on')
    // Append while the view is open: the rows arrive through the live stream.
    const log = await AgentLog.open({ root })
    const blob = (JSON.parse(lines[0] as string) as { blob: string }).blob
    await log.appendMany(
      'agent-1',
      Array.from({ length: 25 }, (_, i) => ({ op: 'write' as const, path: `live/${i}.ts`, blob })),
    )
    await log.append('agent-1', { op: 'delete', path: 'live/0.ts' })
    await log.close()
    const end = last.seq + 26
    await expect.poll(() => row(end).locator('.cell').nth(3).textContent()).toBe('live/0.ts')
    await expect.poll(() => page.getByTestId('log-range').textContent()).toContain(`–${end} (${end} entries)`)
    await shot('workspace-log')
    // A seq has a URL: jump to one and see its entry.
    await go('#/ws/agent-1/seq/3')
    await expect.poll(() => page.getByTestId('entry-detail').textContent()).toContain('"seq": 3')
    const third = JSON.parse(lines[2] as string) as { path: string }
    expect(await row(3).locator('.cell').nth(3).textContent()).toContain(third.path)
  })

  it('snapshot → its tree → a file → a diff, each as the CLI gives it', async () => {
    const history = JSON.parse(cli(['history', 'main', '--root', root])) as {
      snapshotId: string
      kind: string
    }[]
    await go('#/ws/main/history')
    await page.locator('[data-snapshot]').first().waitFor()
    const shown = await page
      .locator('[data-snapshot]')
      .evaluateAll((els) => els.map((e) => e.getAttribute('data-snapshot')))
    expect(shown).toEqual(history.map((n) => n.snapshotId).reverse())
    await shot('history')
    // The first snapshot: its tree, as noa tree --json lists it.
    await page.locator(`[data-snapshot="${snapshots.first}"] a`).first().click()
    const tree = cli(['tree', snapshots.first, '--root', root])
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { path: string }).path)
    await page.getByTestId('tree').locator('[data-path]').first().waitFor()
    expect(
      await page
        .getByTestId('tree')
        .locator('[data-path]')
        .evaluateAll((els) => els.map((e) => e.textContent)),
    ).toEqual(tree)
    // A text file shown, a binary one named.
    await page.locator('[data-path="README.md"]').click()
    await expect.poll(() => page.getByTestId('blob-text').textContent()).toBe('# demo\n\nfirst line\n')
    expect(page.url()).toContain(`#/tree/${snapshots.first}/README.md`)
    await shot('tree')
    await page.locator('[data-path="data.bin"]').click()
    await expect.poll(() => page.getByTestId('blob-binary').textContent()).toBe('binary: 5 bytes')
    // The merge against the first snapshot, as noa diff --json says.
    const diff = JSON.parse(cli(['diff', snapshots.first, snapshots.merge, '--root', root])) as {
      changes: { path: string; status: string }[]
    }
    await go(`#/diff/${snapshots.first}/${snapshots.merge}`)
    await page.locator('.diff .file').first().waitFor()
    const files = await page
      .locator('.diff .file')
      .evaluateAll((els) => els.map((e) => e.getAttribute('data-path')))
    expect(files).toEqual(diff.changes.map((c) => c.path))
    expect(await page.locator('.line-add').allTextContents()).toContain('+first line, edited')
    await shot('diff')
  })

  it('agent files: the transcript, memory notes and context as the CLI gives them', async () => {
    const show = JSON.parse(
      cli(['transcript', 'show', transcriptPath(join(root, 'transcripts'), 'xss-session')]),
    ) as { messages: number }
    await go('#/transcript/xss-session')
    await page.getByTestId('message').first().waitFor()
    expect(await page.getByTestId('message').count()).toBe(show.messages)
    expect(await page.getByTestId('tool-use').count()).toBe(1)
    // Thinking is folded.
    expect(await page.locator('details.thinking').getAttribute('open')).toBeNull()
    await shot('transcript')
    const notes = JSON.parse(cli(['memory', 'list', '--dir', join(root, 'memory')])) as { name: string }[]
    await go('#/memory')
    await page.getByTestId('note').first().waitFor()
    expect(await page.getByTestId('note').locator('b').allTextContents()).toEqual(notes.map((n) => n.name))
    expect(await page.getByTestId('memory-index').textContent()).toContain('Hostile note')
    await shot('memory')
    const state = JSON.parse(cli(['context', 'state', join(root, 'context'), 'xss-session'])) as {
      blocks: { blockId: string }[]
    }
    await go('#/context/xss-session')
    await page.getByTestId('context-block').first().waitFor()
    expect(await page.getByTestId('context-block').count()).toBe(state.blocks.length)
    await shot('context')
  })

  it('a LangGraph thread as its checkpoints, an Agents session as its items, as the adapters give them', async () => {
    await go('#/ws/lg.chat-1/langgraph')
    await page.getByTestId('checkpoint').first().waitFor()
    const ids = await page.getByTestId('checkpoint').locator('b.mono').allTextContents()
    // The saver lists newest first; the view shows the timeline oldest first.
    expect(ids).toEqual(checkpointIds.slice().reverse())
    await shot('langgraph')
    await go('#/ws/oa.customer-42/agents')
    await page.getByTestId('item').first().waitFor()
    const shown = await page.getByTestId('item').locator('pre').allTextContents()
    expect(shown.map((t) => JSON.parse(t))).toEqual(items)
    expect(shown[0]).toContain(HOSTILE)
  })

  it('strings carrying HTML are shown as text: no dialog, no request leaves the page', async () => {
    const before = requests.length
    const views: [string, string][] = [
      ['#/transcript/xss-session', HOSTILE],
      ['#/memory', IMG],
      ['#/memory', SCRIPT],
      ['#/context/xss-session', HOSTILE],
      [`#/tree/${snapshots.first}/${encodeURIComponent(HOSTILE_PATH)}`, HOSTILE],
      ['#/ws/main', HOSTILE_PATH],
      ['#/ws/lg.chat-1/langgraph', IMG],
      ['#/ws/oa.customer-42/agents', SCRIPT],
    ]
    for (const [hash, text] of views) {
      await go(hash)
      await expect.poll(() => page.locator('main').textContent(), { timeout: 10_000 }).toContain(text)
    }
    await page.getByTestId('blob-text').count()
    // Markup in the data made no element: no img, no script but the bundle.
    await go(`#/tree/${snapshots.first}/${encodeURIComponent(HOSTILE_PATH)}`)
    await expect.poll(() => page.getByTestId('blob-text').textContent()).toBe(`${HOSTILE}\n`)
    expect(await page.locator('main img').count()).toBe(0)
    expect(await page.locator('script').evaluateAll((els) => els.map((e) => e.getAttribute('src')))).toEqual([
      '/app.js',
    ])
    expect(dialogs).toEqual([])
    const strays = requests
      .slice(before)
      .filter((u) => !u.startsWith(`${ui.base}/`) || new URL(u).pathname === '/x')
    expect(strays).toEqual([])
  })
})
