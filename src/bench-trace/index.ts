export * from './report.ts';
export * from './simulate.ts';
export * from './trace-reuse.ts';
