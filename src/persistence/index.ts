/** The shared-state markdown log: rendering, the ordered writer, and the reader that parses it back. */

export { logHeadings, readLog, readLogFile, readLogRunId, readLogTail } from './log-reader.js';
export type { LogWriterOptions } from './log-writer.js';
export { LogWriter } from './log-writer.js';
export {
  eventMarker,
  fenced,
  fenceFor,
  inline,
  LOG_TITLE,
  RUN_ID_PREFIX,
  renderEvent,
  renderLog,
} from './markdown-log.js';
