// Preloaded (`node --require`) into server-everything's HTTP mode by crow's tests: the
// server listens on every interface by default; tests must only open 127.0.0.1.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    const [port, ...rest] = args;
    const cb = rest.find((a) => typeof a === "function");
    return cb ? listen.call(this, Number(port), "127.0.0.1", cb) : listen.call(this, Number(port), "127.0.0.1");
  }
  return listen.apply(this, args);
};
