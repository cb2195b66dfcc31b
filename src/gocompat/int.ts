/**
 * Go's `int` (64 bits on every platform Norma ships for) in JavaScript: a `number` while the
 * value is exact in a double, a `bigint` beyond ±(2^53 - 1). A value is never a bigint that
 * would fit a number, so `===` against small literals keeps working and two equal values are
 * always the same JS value (Map keys, Set members).
 */

export type GoInt = number | bigint

const MIN_INT64 = -(1n << 63n)
const MAX_INT64 = (1n << 63n) - 1n
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** The canonical form of an int64 value. */
export function goIntOf(v: bigint): GoInt {
  return v >= -MAX_SAFE && v <= MAX_SAFE ? Number(v) : v
}

/**
 * `strconv.ParseInt(text, 10, 64)` on the text of a JSON number, as Go's decoder does for an
 * `int` field: undefined for a fraction, an exponent or a value outside int64.
 */
export function parseGoInt(text: string): GoInt | undefined {
  if (!/^-?\d+$/.test(text)) return undefined
  if (text.length < 16) {
    const n = Number(text)
    return n === 0 ? 0 : n // -0 is 0
  }
  const v = BigInt(text)
  if (v < MIN_INT64 || v > MAX_INT64) return undefined
  return goIntOf(v)
}

/** Go's `a + b` on int: wraps around at 64 bits. */
export function goIntAdd(a: GoInt, b: GoInt): GoInt {
  if (typeof a === 'number' && typeof b === 'number') {
    const s = a + b
    if (Number.isSafeInteger(s)) return s
  }
  return goIntOf(BigInt.asIntN(64, BigInt(a) + BigInt(b)))
}

/** `%d` of an int. */
export function goIntText(n: GoInt): string {
  return typeof n === 'bigint' ? n.toString() : n === 0 ? '0' : String(n)
}

/** Whether `v` is a Go int value as noa holds it (a safe integer, or a bigint beyond one, in int64). */
export function isGoInt(v: unknown): v is GoInt {
  if (typeof v === 'number') return Number.isSafeInteger(v)
  if (typeof v === 'bigint') return v >= MIN_INT64 && v <= MAX_INT64 && (v > MAX_SAFE || v < -MAX_SAFE)
  return false
}

/** Compares two ints (negative, zero, positive). */
export function goIntCompare(a: GoInt, b: GoInt): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b
  const x = BigInt(a)
  const y = BigInt(b)
  return x < y ? -1 : x > y ? 1 : 0
}

const BIG = '\u0000goint:'
const BIG_TEXT = /"\\u0000goint:(-?\d+)"/g

/** JSON.stringify that writes a bigint (an int past 2^53) as its exact digits, as a JSON number. */
export function stringifyWithInts(value: unknown, space?: number): string {
  const text = JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${BIG}${v}` : v), space)
  return text.includes('\\u0000goint:') ? text.replace(BIG_TEXT, '$1') : text
}
