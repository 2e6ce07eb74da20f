"""An HTTP server that misbehaves as an overloaded or broken S3 endpoint
would, for tests/s3_test.sh's bad-input cases. It is not an S3 server: it
answers every request to bucket "slowdown" with 503 SlowDown, and every
request to bucket "truncated" with a 200 whose body stops halfway through
its Content-Length (the connection is then closed). Each request is logged
as one line naming the bucket.

    python3 tests/s3_bad_server.py PORT_FILE    (writes the port it listens on, on 127.0.0.1)
"""
import http.server
import sys

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')
LISTING = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>truncated</Name>'
           b'<IsTruncated>false</IsTruncated>' + b'<Contents><Key>k</Key><Size>1</Size></Contents>' * 20 +
           b'</ListBucketResult>')


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def answer(self):
        length = int(self.headers.get('Content-Length') or 0)
        if length:
            self.rfile.read(length)
        bucket = self.path.lstrip('/').split('/')[0].split('?')[0]
        sys.stdout.write(f'{self.command} {bucket}\n')
        sys.stdout.flush()
        if bucket == 'truncated':
            self.send_response(200)
            self.send_header('Content-Type', 'application/xml')
            self.send_header('Content-Length', str(len(LISTING)))
            self.end_headers()
            if self.command != 'HEAD':
                self.wfile.write(LISTING[:len(LISTING) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_response(503)
        self.send_header('Content-Type', 'application/xml')
        self.send_header('Content-Length', str(len(SLOWDOWN)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(SLOWDOWN)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = answer

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    with open(sys.argv[1] + '.tmp', 'w') as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + '.tmp', sys.argv[1])
    server.serve_forever()


if __name__ == '__main__':
    main()
