/** A peer broke the protocol (unexpected message, malformed field): its connection is closed. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}
