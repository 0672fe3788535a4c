# The pge image: the CLI and its runtime dependencies, built from this repository.
# Two stages: the first installs every dependency and compiles dist; the second installs the
# runtime dependencies alone and takes dist from the first, so the image ships no compiler, linter
# or test tool. tests/deploy/image.test.ts replays the second stage's commands without Docker.

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# `prepare` would build before the sources are copied: scripts are skipped and the build runs below.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The build's second half bundles the dashboard's page script into dist (src/dashboard/browser).
COPY scripts/gen-dashboard-script.ts ./scripts/
RUN npm run build

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
# No dependency needs an install script; `prepare` would call a TypeScript that is not installed here.
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts
COPY --from=build /app/dist ./dist
COPY bin ./bin
ENTRYPOINT ["node", "/app/bin/pge.js"]
