/**
 * The folder-tree format's names in one place, for the object store (objects.ts) and any code
 * written against this path before the format was split by job: it only re-exports. The
 * folder encoding and Records are in tree-records.ts; a folder as read (Dir) and the pack base
 * (Pack) in pack.ts; the two pack formats in pack-v1.ts and pack-v2.ts, and decodePack, which
 * picks one, in pack-decode.ts; building a pack from a base and changes in pack-build.ts, and
 * from sorted files in pack-walk.ts.
 */
export { Dir, Pack, type PackSource } from './pack.js'
export { buildPack, encodedPack } from './pack-build.js'
export { decodePack } from './pack-decode.js'
export { PACK_HEADER } from './pack-v1.js'
export { PACK2_HEADER } from './pack-v2.js'
export { packFromSorted, packFromSortedTwice, type SortedFiles } from './pack-walk.js'
export { comparePaths, DIR_HEADER, EMPTY_DIR_ID, Records, sha256hex, TAIL } from './tree-records.js'
