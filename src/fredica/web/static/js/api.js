// JSON API client. In token mode (auth.mode: token) a 401 makes the page ask for a publisher
// token, kept in localStorage and sent as `Authorization: Bearer <token>`.

import { t, translateDom } from "./i18n.js";

const TOKEN_KEY = "fredica.token";
const tokenListeners = new Set();

export class ApiError extends Error {
  constructor(message, status, data) {
    super(message);
    this.status = status;
    this.data = data;
  }
}

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
  for (const fn of tokenListeners) fn(token);
}

export function onTokenChange(fn) {
  tokenListeners.add(fn);
  return () => tokenListeners.delete(fn);
}

/** `url` with `?token=` added when a token is set: for EventSource and download links, which
 * cannot send an Authorization header. */
export function withToken(url) {
  const token = getToken();
  if (!token) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`;
}

let tokenPrompt = null;

/** Ask for a token once, however many requests got a 401 at the same time. */
function askToken(reason) {
  if (tokenPrompt) return tokenPrompt;
  const dialog = document.getElementById("token-dialog");
  const input = dialog.querySelector("input[name=token]");
  const message = dialog.querySelector(".dialog-error");
  translateDom(dialog);
  message.textContent = reason && getToken() ? t("token.rejected", { error: reason }) : "";
  message.hidden = !message.textContent;
  input.value = "";
  tokenPrompt = new Promise((resolve) => {
    const finish = (ok) => {
      dialog.removeEventListener("close", onClose);
      dialog.querySelector("form").removeEventListener("submit", onSubmit);
      tokenPrompt = null;
      resolve(ok);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (!value) return;
      setToken(value);
      dialog.close("saved");
    };
    const onClose = () => finish(dialog.returnValue === "saved");
    dialog.querySelector("form").addEventListener("submit", onSubmit);
    dialog.addEventListener("close", onClose);
    dialog.returnValue = "";
    dialog.showModal();
    input.focus();
  });
  return tokenPrompt;
}

/** Send a request (asking for a token on a 401); returns the response and its text, or throws
 * ApiError with the server's message. */
async function send(method, path, body, accept) {
  for (let attempt = 0; ; attempt += 1) {
    const headers = { Accept: accept };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiError(String(err.message || err), 0, null);
    }
    const text = await response.text();
    if (response.ok) return { response, text };
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { error: text };
      }
    }
    if (response.status === 401 && attempt < 3) {
      const reason = data && (data.error || data.detail);
      if (await askToken(typeof reason === "string" ? reason : "")) continue;
    }
    const detail = data && (data.error || data.detail);
    const message =
      typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : response.statusText;
    throw new ApiError(message || `HTTP ${response.status}`, response.status, data);
  }
}

/** Call the API; returns the parsed JSON body or throws ApiError with the server's message. */
export async function api(method, path, body) {
  const { text } = await send(method, path, body, "application/json");
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { error: text };
  }
}

/** GET a text answer (a task log): its text and headers. */
export async function getText(path) {
  const { response, text } = await send("GET", path, undefined, "text/plain");
  return { text, headers: response.headers };
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body ?? {});
export const del = (path) => api("DELETE", path);
