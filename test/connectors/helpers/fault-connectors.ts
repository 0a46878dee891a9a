/**
 * The NIXL and MoRIIO connectors with faults in their workers' transfer agents, loaded by an
 * engine through kv_connector_module_path (withFaultConnectors) and plugged in through the
 * connectors' createTransferAgent seam. Each class has its built-in's name, so the engine,
 * server and metrics see the connector they expect. Production code never imports this module.
 *
 * - `agentFaults.outgoing`: what the agents created from now on send instead of each outgoing
 *   chunk (AgentSeams.outgoing; such an agent runs on the caller's loop).
 * - env EXIT_AFTER_WRITES_ENV / STOP_AFTER_WRITES_ENV = N: the process exits (code 137) or
 *   stops itself (SIGSTOP) right after its agent posted its Nth WRITE (a producer killed, or
 *   gone silent, mid-transfer).
 */
import { fileURLToPath } from 'node:url';
import * as moriio from '../../../src/connectors/moriio/index.ts';
import * as nixl from '../../../src/connectors/nixl/index.ts';
import type { LLMOptions } from '../../../src/engine/llm.ts';
import {
  type AgentSeams,
  type CreateAgentOptions,
  createTransferAgent,
  InThreadTransferAgent,
  type TransferAgent,
} from '../../../src/transfer/index.ts';

export const EXIT_AFTER_WRITES_ENV = 'KVCONNECT_TEST_EXIT_AFTER_WRITES';
export const STOP_AFTER_WRITES_ENV = 'KVCONNECT_TEST_STOP_AFTER_WRITES';

export const agentFaults: { outgoing?: AgentSeams['outgoing'] } = {};

/** A transfer config that loads these classes instead of the built-ins of the same names. */
export function faultConnectorsConfig<T extends object>(kvTransferConfig: T): T {
  return { ...kvTransferConfig, kv_connector_module_path: fileURLToPath(import.meta.url) };
}

/** Engine options whose transfer config (an object) loads these classes. */
export function withFaultConnectors(options: LLMOptions): LLMOptions {
  const config = options.kvTransferConfig;
  if (typeof config !== 'object' || config === null) throw new Error('expected a kvTransferConfig object');
  return { ...options, kvTransferConfig: faultConnectorsConfig(config) };
}

async function faultyAgent(options: CreateAgentOptions): Promise<TransferAgent> {
  const outgoing = agentFaults.outgoing;
  let agent: TransferAgent;
  if (outgoing) {
    // An outgoing transform cannot cross into a thread: this agent runs on the caller's loop.
    const { thread: _, ...rest } = options;
    agent = await InThreadTransferAgent.create(rest, { outgoing });
  } else {
    agent = await createTransferAgent(options);
  }
  const exitAfter = Number(process.env[EXIT_AFTER_WRITES_ENV] ?? 0);
  if (exitAfter > 0) return afterWrites(agent, exitAfter, () => process.exit(137));
  const stopAfter = Number(process.env[STOP_AFTER_WRITES_ENV] ?? 0);
  if (stopAfter > 0) return afterWrites(agent, stopAfter, () => process.kill(process.pid, 'SIGSTOP'));
  return agent;
}

/** `agent`, calling `then` right after its `n`th WRITE was posted. */
function afterWrites(agent: TransferAgent, n: number, then: () => void): TransferAgent {
  let left = n;
  const write: TransferAgent['write'] = (...args) => {
    const handle = agent.write(...args);
    if (--left === 0) then();
    return handle;
  };
  return new Proxy(agent, {
    get(target, key) {
      if (key === 'write') return write;
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

export class NixlConnector extends nixl.NixlConnector {
  protected override createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
    return faultyAgent(options);
  }
}

export class NixlPushConnector extends nixl.NixlPushConnector {
  protected override createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
    return faultyAgent(options);
  }
}

export class MoRIIOConnector extends moriio.MoRIIOConnector {
  protected override createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
    return faultyAgent(options);
  }
}
