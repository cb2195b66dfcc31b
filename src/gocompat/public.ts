/**
 * `noa/gocompat`: what Go does that JavaScript does differently, for tools that write or read the
 * same bytes as Norma: Go's lower-casing and space trimming, Go's JSON string and int forms, and
 * Go's view of invalid UTF-8. (`index.ts` is the layer's inner barrel, used by transcript, memory
 * and context; this file is the part a host may rely on.)
 */
export { type GoInt, isGoInt } from './int.js'
export { goInt, goString, htmlEscape } from './json.js'
export { goToLower, goTrimSpace } from './text.js'
export { describeInvalidUtf8, findInvalidUtf8, type Utf8Problem } from './utf8.js'
