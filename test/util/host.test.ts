import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bracketHost } from '../../src/util/host.ts';

test('an IPv6 host goes in brackets once; names and IPv4 stay as they are', () => {
  assert.equal(bracketHost('::1'), '[::1]');
  assert.equal(bracketHost('[fe80::1]'), '[fe80::1]');
  assert.equal(bracketHost('127.0.0.1'), '127.0.0.1');
  assert.equal(bracketHost('localhost'), 'localhost');
});
