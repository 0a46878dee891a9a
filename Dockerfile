# kvconnect's container image: `docker build -t kvconnect:0.1.0 .` (docs/deploy.md).
# The build stage installs the dependencies, compiles the native addon (native/, through
# scripts/build-native.mjs at `npm ci`) and the TypeScript (dist/, at `prepare`); the runtime
# stage holds only what `kvconnect serve` and `kvconnect proxy` load: dist/, the production
# node_modules, the addon and the bundled kjv-llama checkpoint.
#
# scripts/docker-steps.ts runs these steps as a plain script on a clean checkout. Keep every
# RUN line relative to its WORKDIR, and every COPY a plain path.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
# node-gyp needs python3 and make; the addon is C and C++.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json .npmrc tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY native ./native
COPY src ./src
RUN npm ci
# The addon is optional at `npm ci` (kvconnect falls back to WebAssembly); the image must have it.
RUN node --input-type=module -e "const m = await import('./dist/util/native-addon.js'); if (!m.nativeAddon) { console.error('native addon: ' + m.nativeAddonReason); process.exit(1); }"
RUN npm prune --omit=dev

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/native/build/Release/kvshm.node ./native/build/Release/kvshm.node
COPY models/kjv-llama ./models/kjv-llama
# The copied addon loads here too (the runtime base has the C++ runtime it links).
RUN node --input-type=module -e "const m = await import('./dist/util/native-addon.js'); if (!m.nativeAddon) { console.error('native addon: ' + m.nativeAddonReason); process.exit(1); }"
USER node
# HTTP (serve, proxy), KV events (ZMQ PUB), NIXL side channel.
EXPOSE 8000 5557 5600
ENTRYPOINT ["node", "/app/dist/cli/main.js"]
CMD ["--help"]
