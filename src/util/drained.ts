/** Resolves when a writable stream drains or closes (whichever comes first). */
export function drained(stream: NodeJS.EventEmitter): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
