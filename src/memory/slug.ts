import { goToLower, trimLeftSet, trimRightSet } from '../gocompat/index.js'

/**
 * Norma's file stem for a memory name: Go-lowercased, every run of `[^a-z0-9]` replaced by
 * one `-`, `-` trimmed from both ends. Empty for a name with no ASCII letter or digit.
 */
export function slug(name: string): string {
  return trimRightSet(trimLeftSet(goToLower(name).replace(/[^a-z0-9]+/gu, '-'), '-'), '-')
}
