/**
 * For .ci/run: probes each privileged capability the fault tests need and prints, on stdout,
 * one `export KVCONNECT_EXPECT_<NAME>=1` line per capability that works (plus
 * KVCONNECT_EXPECT_PRIVILEGED=1 when all do), and on stderr a NOTE for each that does not,
 * naming the tests that will skip and the probe's reason.
 */
import {
  CAPABILITIES,
  type Capability,
  DESCRIPTION,
  EXPECT_ENV,
  EXPECT_PRIVILEGED_ENV,
  probeCapability,
} from './capabilities.ts';

const TESTS: Readonly<Record<Capability, string>> = {
  netns: 'test/faults/netns-link.test.ts (NIXL over a bandwidth-limited / unplugged veth link)',
  tmpfs: 'test/faults/fs-tier-faults.test.ts "a full filesystem"',
  loop: 'test/faults/fs-tier-faults.test.ts "EIO"',
  setpriv: 'test/faults/fs-tier-faults.test.ts "EACCES"',
};

let missing = 0;
for (const cap of CAPABILITIES) {
  const why = probeCapability(cap);
  if (why === null) {
    process.stdout.write(`export ${EXPECT_ENV[cap]}=1\n`);
    continue;
  }
  missing++;
  process.stderr.write(
    `\n*** NOTE: ${DESCRIPTION[cap]} is not possible on this machine: ${why}\n*** NOTE: these fault tests will SKIP: ${TESTS[cap]}\n`,
  );
}
if (missing === 0) process.stdout.write(`export ${EXPECT_PRIVILEGED_ENV}=1\n`);
else
  process.stderr.write(
    `*** NOTE: ${missing} of ${CAPABILITIES.length} privileged capabilities missing; ${EXPECT_PRIVILEGED_ENV} is not set.\n\n`,
  );
