// A loopback proxy that adds a tenant's key to every request: the official conformance
// suite cannot send an Authorization header, and Warden's /mcp needs one. Headers (Host
// and Origin included, for the DNS-rebinding scenario) and bodies (SSE streams too) pass
// unchanged. Usage: TARGET=http://127.0.0.1:PORT KEY=wdn_... LISTEN=PORT node proxy.mjs
import http from "node:http";

const target = new URL(process.env.TARGET);
const key = process.env.KEY;
http
  .createServer((req, res) => {
    const headers = { ...req.headers, authorization: `Bearer ${key}` };
    const upstream = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", (e) => {
      res.writeHead(502);
      res.end(`proxy: ${e}`);
    });
    req.pipe(upstream);
  })
  .listen(Number(process.env.LISTEN), "127.0.0.1");
