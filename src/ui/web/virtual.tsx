/**
 * A virtualized list: only the rows in sight (and a few around) are in the DOM, whatever the
 * count. Past ~10 M pixels (a browser's limit on an element's height is about 33 M) the scroll
 * range is scaled: the scrollbar maps onto row indexes instead of pixels.
 */
import type { ComponentChildren } from 'preact'
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks'

const MAX_PX = 10_000_000
const OVERSCAN = 8

export interface VirtualListProps {
  count: number
  rowHeight: number
  height: number
  row: (index: number) => ComponentChildren
  /** Scroll so that this row is in sight (changes of it scroll; the same value again does not). */
  scrollTo?: { index: number; key: number } | null
  /** Stay at the bottom as rows are added (while the user has not scrolled up). */
  follow?: boolean
  onRange?: (first: number, last: number) => void
  /** The user scrolled up (away from the newest rows). */
  onScrollUp?: () => void
  className?: string
}

export function VirtualList(p: VirtualListProps) {
  const box = useRef<HTMLDivElement>(null)
  const [top, setTop] = useState(0)
  const natural = p.count * p.rowHeight
  const total = Math.min(natural, MAX_PX)
  const scaled = natural > MAX_PX
  const visible = Math.ceil(p.height / p.rowHeight)
  const maxTop = Math.max(1, total - p.height)
  const first = scaled
    ? Math.floor((Math.min(top, maxTop) / maxTop) * Math.max(0, p.count - visible))
    : Math.floor(top / p.rowHeight)
  const start = Math.max(0, first - OVERSCAN)
  const end = Math.min(p.count, first + visible + OVERSCAN)
  const winTop = scaled ? top - (first - start) * p.rowHeight : start * p.rowHeight
  const last = useRef(0)

  const toIndex = (index: number) => {
    const el = box.current
    if (!el) return
    const y = scaled
      ? (index / Math.max(1, p.count - visible)) * maxTop
      : Math.max(0, index * p.rowHeight - p.height / 2 + p.rowHeight)
    el.scrollTop = y
    last.current = el.scrollTop
    setTop(el.scrollTop)
  }
  useEffect(() => {
    if (p.scrollTo) toIndex(p.scrollTo.index)
  }, [p.scrollTo?.key])
  useLayoutEffect(() => {
    const el = box.current
    if (el && p.follow) {
      el.scrollTop = el.scrollHeight
      last.current = el.scrollTop
      setTop(el.scrollTop)
    }
  }, [p.count, p.follow])
  useEffect(() => {
    p.onRange?.(first, Math.min(p.count, first + visible) - 1)
  }, [first, p.count])

  const rows: ComponentChildren[] = []
  for (let i = start; i < end; i++) rows.push(p.row(i))
  return (
    <div
      ref={box}
      class={`vlist ${p.className ?? ''}`}
      style={{ height: `${p.height}px` }}
      onScroll={(e) => {
        const y = (e.currentTarget as HTMLDivElement).scrollTop
        if (y < last.current - 2) p.onScrollUp?.()
        last.current = y
        setTop(y)
      }}
    >
      <div class="vspace" style={{ height: `${total}px` }}>
        <div class="vwin" style={{ top: `${winTop}px` }}>
          {rows}
        </div>
      </div>
    </div>
  )
}
