/**
 * How a bundle's model was trained: the manifest's optional `training` object
 * (sdk/uvsdk/training.py; docs/spec.md §3.10). A DP-trained FedUV bundle says
 * `"enrollment": "prototype"`: codeword mode is a membership test there, its EER floored by the
 * privacy guarantee (`membership_eer_floor`), while enrollment after training is not.
 * `epsilon` holds against anyone who sees the released model, `epsilon_server` (optional, since
 * spec version 5; validated when present) against the server that picked the cohorts. Nothing
 * here is secret.
 */
import type { Mode } from "./calibration.js";
import { BundleError } from "./errors.js";
import { isObject, type JsonObject, type JsonValue } from "./json.js";
import { num, quote } from "./text.js";

export const MECHANISMS = ["central", "distributed"] as const;
const TRAINING_KEYS = ["method", "privacy", "enrollment"];
const PRIVACY_KEYS = ["mechanism", "epsilon", "delta", "simulated_deployment", "membership_eer_floor", "epsilon_server"];
/** Who `epsilon_server` holds against, by placement of the noise (sdk/uvsdk/training.py). */
const SERVER_ADVERSARY = {
  distributed: "against the server that ran training",
  central: "against anyone who knows who trained in each round (not the server, which added the noise)",
} as const;

/** The user-level DP guarantee of the run (`training.privacy`). */
export interface Privacy {
  mechanism: (typeof MECHANISMS)[number];
  epsilon: number;
  delta: number;
  simulatedDeployment: boolean;
  membershipEerFloor: number;
  /** ε against the server that picked the cohorts; null: not stated (bundles before spec version 5). */
  epsilonServer: number | null;
}

/** The manifest's `training` (privacy null: trained without DP). */
export interface Training {
  method: string;
  privacy: Privacy | null;
  /** The mode the SDK enrolls in by default. */
  enrollment: Mode;
}

function refuseUnknown(data: JsonObject, known: string[], name: string): void {
  const unknown = Object.keys(data)
    .filter((key) => !known.includes(key))
    .sort();
  if (unknown.length > 0) throw new BundleError(`manifest: ${name} has an unknown key ${quote(unknown[0]!)}`);
}

function number(data: JsonObject, key: string): number {
  const value = data[key];
  if (typeof value !== "number" && typeof value !== "bigint") {
    throw new BundleError(`manifest: training.privacy.${key} must be a number`);
  }
  const result = Number(value);
  if (!Number.isFinite(result)) throw new BundleError(`manifest: training.privacy.${key} must be finite`);
  return result;
}

/** `Privacy.from_dict`. */
export function parsePrivacy(data: JsonValue | undefined): Privacy {
  if (!isObject(data)) throw new BundleError("manifest: training.privacy must be an object or null");
  refuseUnknown(data, PRIVACY_KEYS, "training.privacy");
  const mechanism = data["mechanism"];
  if (mechanism !== "central" && mechanism !== "distributed") {
    throw new BundleError("manifest: training.privacy.mechanism must be 'central' or 'distributed'");
  }
  const epsilon = number(data, "epsilon");
  if (!(epsilon > 0)) throw new BundleError("manifest: training.privacy.epsilon must be > 0");
  const delta = number(data, "delta");
  if (!(delta > 0 && delta < 1)) throw new BundleError("manifest: training.privacy.delta must be in (0, 1)");
  const simulated = data["simulated_deployment"];
  if (typeof simulated !== "boolean") {
    throw new BundleError("manifest: training.privacy.simulated_deployment must be true or false");
  }
  const floor = number(data, "membership_eer_floor");
  if (!(floor >= 0 && floor <= 0.5)) {
    throw new BundleError("manifest: training.privacy.membership_eer_floor must be in [0, 0.5]");
  }
  let epsilonServer: number | null = null;
  if ("epsilon_server" in data) {
    // optional: bundles before spec version 5 lack it; validated when present
    epsilonServer = number(data, "epsilon_server");
    if (!(epsilonServer > 0)) throw new BundleError("manifest: training.privacy.epsilon_server must be > 0");
  }
  if (floor < membershipFloorBound(epsilon, delta) - FLOOR_TOLERANCE) {
    throw new BundleError(
      "manifest: training.privacy.membership_eer_floor is below (1 - delta) / (1 + e^epsilon), the least that " +
        "epsilon and delta themselves guarantee: the privacy claims contradict each other",
    );
  }
  return { mechanism, epsilon, delta, simulatedDeployment: simulated, membershipEerFloor: floor, epsilonServer };
}

/** `training.FLOOR_TOLERANCE`: how far below the bound a stated floor may be. */
export const FLOOR_TOLERANCE = 1e-6;

/**
 * `training.membership_floor_bound`: (1 − δ) / (1 + e^ε), the lowest membership-test EER one
 * (ε, δ) point of a guarantee allows (Kairouz et al. 2015); a run's floor is never below it.
 */
export function membershipFloorBound(epsilon: number, delta: number): number {
  const tail = Math.exp(-epsilon);
  return ((1 - delta) * tail) / (1 + tail);
}

/** `Training.from_dict`: validate `training`; enrollment `codeword` needs a codeword bundle. */
export function parseTraining(data: JsonValue | undefined, outputKind: string): Training {
  if (!isObject(data)) throw new BundleError("manifest: training must be an object");
  refuseUnknown(data, TRAINING_KEYS, "training");
  const method = data["method"];
  if (typeof method !== "string" || method === "") {
    throw new BundleError("manifest: training.method must be a non-empty string");
  }
  if (!("privacy" in data)) throw new BundleError("manifest: training.privacy is missing (null: trained without DP)");
  const privacy = data["privacy"] === null ? null : parsePrivacy(data["privacy"]);
  const enrollment = data["enrollment"];
  if (enrollment !== "prototype" && enrollment !== "codeword") {
    throw new BundleError("manifest: training.enrollment must be 'prototype' or 'codeword'");
  }
  if (enrollment === "codeword" && outputKind !== "codeword") {
    throw new BundleError("manifest: training.enrollment 'codeword' needs output.kind 'codeword'");
  }
  if (enrollment === "codeword" && privacy !== null) {
    throw new BundleError(
      "manifest: training.enrollment 'codeword' contradicts training.privacy: under DP, verifying a user by their " +
        "trained codeword is a membership test the privacy bounds (enrollment must be 'prototype')",
    );
  }
  return { method, privacy, enrollment };
}

/** `Training.to_dict`. */
export function trainingToDict(training: Training): Record<string, unknown> {
  const privacy = training.privacy;
  return {
    method: training.method,
    privacy:
      privacy === null
        ? null
        : {
            mechanism: privacy.mechanism,
            epsilon: privacy.epsilon,
            delta: privacy.delta,
            simulated_deployment: privacy.simulatedDeployment,
            membership_eer_floor: privacy.membershipEerFloor,
            ...(privacy.epsilonServer === null ? {} : { epsilon_server: privacy.epsilonServer }),
          },
    enrollment: training.enrollment,
  };
}

/**
 * `Privacy.describe`: "user-level DP: ε = 8 against anyone who sees the released model, ε = 22.4
 * against the server that ran training (δ = 1e-06, distributed)", plus the simulated scale.
 */
export function describePrivacy(privacy: Privacy): string {
  const server =
    privacy.epsilonServer === null
      ? "ε against the server that ran training not stated"
      : `ε = ${num(privacy.epsilonServer, 3)} ${SERVER_ADVERSARY[privacy.mechanism]}`;
  const text =
    `user-level DP: ε = ${num(privacy.epsilon, 3)} against anyone who sees the released model, ` +
    `${server} (δ = ${num(privacy.delta)}, ${privacy.mechanism})`;
  return privacy.simulatedDeployment ? `${text}, at a simulated deployment scale` : text;
}
