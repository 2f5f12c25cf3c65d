select pgmq.send('bench', '{"n": 1}');
