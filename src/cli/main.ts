#!/usr/bin/env node
import { runCli } from './program.ts';

const code = await runCli(process.argv.slice(2));
// Commands that set process.exitCode themselves (bench serve, bench trace) keep it.
if (code !== 0 || process.exitCode === undefined) process.exitCode = code;
