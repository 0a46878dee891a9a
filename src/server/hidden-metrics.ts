/**
 * --show-hidden-metrics-for-version, as vLLM's ObservabilityConfig reads it: the value must
 * be a version (PEP 440; vLLM parses it with packaging.version.parse), and it shows the
 * metrics hidden after a deprecation only when it names the minor release before the one
 * kvconnect follows ("0.31" with 0.32.x), compared as text. Which metrics are hidden follows
 * vLLM's list: its current release hides none (its deprecated offload families are still
 * served as they are), so HIDDEN_METRICS is empty too.
 */
import { KVError } from '../errors/index.ts';
import { REFERENCE_VLLM_VERSION } from './vllm-version.ts';

/** The metric families served only with the flag (vLLM's HIDDEN_DEPRECATED_METRICS). */
export const HIDDEN_METRICS: readonly string[] = [];

// PEP 440's version grammar (its Appendix B), matched case-insensitively with surrounding
// whitespace: one regular expression, so it is written here rather than taken from a package.
const PEP440 = new RegExp(
  '^\\s*v?(?:(?:[0-9]+!)?[0-9]+(?:\\.[0-9]+)*' +
    '(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?' +
    '(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?' +
    '(?:[-_.]?dev[-_.]?[0-9]*)?)' +
    '(?:\\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\\s*$',
  'i',
);

/** The flag's value, checked as vLLM checks it; null when not given. */
export function parseShowHiddenMetricsForVersion(raw: string | null | undefined): string | null {
  if (raw === undefined || raw === null) return null;
  if (!PEP440.test(raw)) {
    const example = previousMinor(REFERENCE_VLLM_VERSION);
    throw new KVError(
      'KV_CONFIG_INVALID',
      `Invalid version: '${raw}' (show_hidden_metrics_for_version expects a version such as ${example})`,
      {
        field: 'show_hidden_metrics_for_version',
        hint: `Pass a release as major.minor, e.g. --show-hidden-metrics-for-version=${example}.`,
      },
    );
  }
  return raw;
}

/** vLLM's _prev_minor_version_pair: the minor before, or the major before at a .0. */
export function previousMinor(version: string): string {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (minor > 0) return `${major}.${minor - 1}`;
  if (major > 0) return `${major - 1}.0`;
  return '0.-1';
}

/** Whether the hidden metrics are shown: the flag names the previous minor release. */
export function showHiddenMetrics(version: string | null, current: string = REFERENCE_VLLM_VERSION): boolean {
  return version !== null && version === previousMinor(current);
}
