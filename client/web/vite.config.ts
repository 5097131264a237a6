// `npm run build` builds the dashboard into dist/; client/web/build.sh OUT_DIR
// (the trainctl-web CMake target: build/web, which the packages ship) into
// OUT_DIR. trainctl-gateway -static-dir serves either. `npm run dev` proxies
// /v1/ to a gateway on 127.0.0.1:8080 (WebSockets too: /v1/terminal).
// Vitest (npm test) runs src/**/*.test.ts with the same config.
import { defineConfig } from "vitest/config";

export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 1024 },
  server: { proxy: { "/v1": { target: "http://127.0.0.1:8080", ws: true } } },
  test: { include: ["src/**/*.test.ts"] },
});
