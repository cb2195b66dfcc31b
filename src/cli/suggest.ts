/**
 * "Did you mean": the known names close to a mistyped one. Close is an edit distance (with
 * adjacent swaps counting one, the commonest typo) of at most a third of the word, or the word
 * being the start of the name, as git and commander judge it.
 */

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  )
  for (let i = 1; i <= a.length; i++) {
    const row = d[i] as number[]
    const prev = d[i - 1] as number[]
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, ((d[i - 2] as number[])[j - 2] as number) + 1)
      row[j] = best
    }
  }
  return (d[a.length] as number[])[b.length] as number
}

/** Up to three known names close to `word`, closest first (leading dashes are not compared). */
export function didYouMean(word: string, known: readonly string[]): string[] {
  const bare = (s: string) => s.replace(/^-+/, '').toLowerCase()
  const w = bare(word)
  if (w === '') return []
  const limit = Math.max(1, Math.floor(w.length / 3))
  return known
    .map((name) => {
      const n = bare(name)
      const distance = editDistance(w, n)
      return { name, distance: w.length >= 3 && n.startsWith(w) ? Math.min(distance, limit) : distance }
    })
    .filter((c) => c.distance <= limit)
    .sort((x, y) => x.distance - y.distance || x.name.localeCompare(y.name))
    .slice(0, 3)
    .map((c) => c.name)
}
