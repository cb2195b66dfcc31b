export { NoaSession, type NoaSessionOptions } from './session.js'
