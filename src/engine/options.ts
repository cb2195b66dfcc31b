/**
 * Option objects are checked at the boundary: a misspelled option is refused by name instead of
 * silently ignored (habit 1 of style.md).
 */
import { Errors } from './errors.js'

/** Throws NOA_BAD_OPTION unless `options` is an object whose keys are all in `known`. */
export function checkOptionKeys(options: unknown, known: ReadonlySet<string>, what?: string): void {
  const label = what ? `${what} option` : 'option'
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw Errors.BAD_OPTION(`${what ? `${what} ` : ''}options must be an object`, {
      field: 'options',
    })
  }
  for (const key of Object.keys(options)) {
    if (!known.has(key)) {
      throw Errors.BAD_OPTION(`unknown ${label} ${key} (known: ${[...known].join(', ')})`, {
        field: key,
      })
    }
  }
}
