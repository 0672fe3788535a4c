# The pge image: the CLI with its dependencies, built from this repository.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
COPY tsconfig.json tsconfig.build.json ./
COPY bin ./bin
COPY src ./src
RUN npm ci --no-audit --no-fund || npm install --no-audit --no-fund
ENTRYPOINT ["node", "/app/bin/pge.js"]
