// Vite builds the dashboard into dist/ (served by trainctl-gateway
// -static-dir); `npm run dev` proxies /v1/ to a gateway on 127.0.0.1:8080.
// Vitest (npm test) runs src/**/*.test.ts with the same config.
import { defineConfig } from "vitest/config";

export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 1024 },
  server: { proxy: { "/v1": "http://127.0.0.1:8080" } },
  test: { include: ["src/**/*.test.ts"] },
});
