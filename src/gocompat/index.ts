/**
 * Go and Norma compatibility, in one place: what Go's encoding/json and strings packages do that
 * JavaScript does differently, for the layers whose files must be byte-for-byte Norma's
 * (transcript, memory, context).
 */
export * from './int.js'
export * from './json.js'
export * from './marshal.js'
export * from './parse.js'
export * from './scan.js'
export * from './text.js'
export * from './unmarshal.js'
export * from './utf8.js'
