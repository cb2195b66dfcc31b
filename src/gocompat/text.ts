/**
 * Go's string semantics where Norma's memory code depends on them. JS and Go disagree in ways
 * that change file names and recall scores: `strings.ToLower` maps each rune by its *simple*
 * lowercase (U+0130 `İ` → `i`; JS gives `i̇`, two code points, and applies the final-sigma rule),
 * and `strings.TrimSpace` trims Unicode White_Space (U+0085 yes, U+FEFF no; JS's trim() is the
 * other way round).
 */

/** The only code points whose JS lowercase is not their simple lowercase (JS case tables). */
const SPECIAL = /([\u0130\u03a3])/

/** Go's `strings.ToLower`: every rune mapped alone by its simple lowercase mapping. */
export function goToLower(s: string): string {
  if (!SPECIAL.test(s)) return s.toLowerCase()
  // Split keeps the separators at odd indexes; everything else has no context rule, so
  // lowering it as a whole equals lowering it rune by rune.
  return s
    .split(SPECIAL)
    .map((part, i) => (i % 2 === 0 ? part.toLowerCase() : part === '\u0130' ? 'i' : '\u03c3'))
    .join('')
}

/** unicode.IsSpace: the Latin-1 spaces plus the White_Space property (all in the BMP). */
function isGoSpace(c: number): boolean {
  if (c <= 0xff) return (c >= 0x09 && c <= 0x0d) || c === 0x20 || c === 0x85 || c === 0xa0
  return (
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  )
}

/** Go's `strings.TrimSpace` (a loop, not a regex: a regex anchored at `$` is quadratic on long runs). */
export function goTrimSpace(s: string): string {
  let i = 0
  let j = s.length
  while (i < j && isGoSpace(s.charCodeAt(i))) i++
  while (j > i && isGoSpace(s.charCodeAt(j - 1))) j--
  return i === 0 && j === s.length ? s : s.slice(i, j)
}

/** Go's `strings.TrimLeft(s, cutset)` / `TrimRight` for a cutset of single-unit characters. */
export function trimLeftSet(s: string, cutset: string): string {
  let i = 0
  while (i < s.length && cutset.includes(s[i] as string)) i++
  return s.slice(i)
}

export function trimRightSet(s: string, cutset: string): string {
  let j = s.length
  while (j > 0 && cutset.includes(s[j - 1] as string)) j--
  return s.slice(0, j)
}
