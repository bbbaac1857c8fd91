export {
  Dlock,
  Hold,
  Latch,
  Lock,
  RWLock,
  type AcquireOptions,
  type AttachOptions,
  type ClientOptions,
  type Kind,
  type ReleaseOutcome,
} from "./client.js";
export {
  AcquireTimeout,
  ConnectionError,
  Deadlock,
  parseCycle,
  type DeadlockStep,
  DlockError,
  Fenced,
  InvalidArgument,
  LockLost,
  ModuleNotLoaded,
  NoReplicas,
  NotDurable,
  NotHeld,
  QueueFull,
  UnexpectedReply,
  UnknownCommand,
  WrongKind,
  WrongType,
  type LostReason,
} from "./errors.js";
export { channelFor, keySlot } from "./slot.js";
export type { Arg, Library } from "./adapters.js";
export { MultiHold, MultiLock, RedHold, RedLock, type RedLockOptions } from "./multi.js";
export { runOnce, type RunOnceOptions, type RunOutcome, type RunResult } from "./recipes/runOnce.js";
export {
  Election,
  Observer,
  Term,
  valueKey,
  type CampaignOptions,
  type ElectionOptions,
  type Leader,
} from "./recipes/election.js";
