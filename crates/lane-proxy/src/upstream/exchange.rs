//! A stream the proxy asks Redis things on itself: commands written in one
//! go, their replies read whole, in order ([`Exchange::call`]).

use crate::resp::encode_args;
use crate::upstream::link::Link;
use crate::upstream::reply::{parse_reply, Reply};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest answer the meter waits for: its questions have short
/// answers, so anything longer means the connection is not what it seems.
const MAX_ANSWER: usize = 1 << 20;

/// A stream to ask on, with what was read of it and not yet parsed.
#[derive(Debug)]
pub struct Exchange {
    stream: Link,
    buf: Vec<u8>,
}

impl Exchange {
    /// Asks on `link`, already authenticated (or needing no credential).
    pub fn new(link: Link) -> Exchange {
        Exchange {
            stream: link,
            buf: Vec::new(),
        }
    }

    /// The stream, once every answer asked for was read.
    pub fn into_link(self) -> Link {
        self.stream
    }

    /// Sends `commands` in one write and reads their replies, in order.
    pub async fn call(&mut self, commands: &[Vec<Vec<u8>>]) -> io::Result<Vec<Reply>> {
        let mut out = Vec::new();
        for c in commands {
            encode_args(&mut out, c);
        }
        self.stream.write_all(&out).await?;
        self.stream.flush().await?;
        let mut replies = Vec::with_capacity(commands.len());
        let mut start = 0;
        while replies.len() < commands.len() {
            match parse_reply(&self.buf[start..]).map_err(io::Error::other)? {
                Some((r, used)) => {
                    replies.push(r);
                    start += used;
                    continue;
                }
                None if self.buf.len() - start > MAX_ANSWER => {
                    return Err(io::Error::other("an answer from Redis is too long"));
                }
                None => {}
            }
            self.buf.drain(..start);
            start = 0;
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::other("Redis closed the connection"));
            }
        }
        self.buf.drain(..start);
        Ok(replies)
    }
}
